<?php

declare(strict_types=1);

namespace Idem;

/**
 * The hold operations->run() took on a key, handed to the function when it takes an argument:
 *
 *     $idem->operations->run('imports', key: $file, leaseSeconds: 60, fn: function (Idem\Lease $lease) use ($rows) {
 *         foreach ($rows as $row) {
 *             importRow($row);
 *             $lease->heartbeat();   // extends the lease once half of it has passed; free otherwise
 *         }
 *     });
 *
 * PHP runs one thing at a time, so the lease is extended when the work says so, not by a
 * background heartbeat. $fence is the lease's fencing number (store it with what the work
 * writes, and refuse a smaller one).
 */
final class Lease
{
    private float $renewedAt;

    /** @internal */
    public function __construct(
        private readonly Operations $operations,
        public readonly string $namespace,
        public readonly string $id,
        #[\SensitiveParameter] private readonly string $token,
        public readonly ?int $fence,
        public readonly int $seconds,
        float $takenAt,
        private readonly Client $client,
    ) {
        $this->renewedAt = $takenAt;
    }

    /**
     * Extends the lease when at least half of it has passed since it was taken or last extended;
     * answers whether it did. Throws LeaseLostException when the key is no longer held: stop the
     * work (run() rethrows it).
     */
    public function heartbeat(): bool
    {
        if ($this->client->now() - $this->renewedAt < $this->seconds / 2) {
            return false;
        }
        $this->extend();
        return true;
    }

    /** Extends the lease now, by its full length. */
    public function extend(): void
    {
        $sentAt = $this->client->now();
        $this->operations->extend($this->namespace, $this->id, $this->token, $this->seconds);
        $this->renewedAt = $sentAt;
    }

    /** Seconds left of the lease, as this process counts them (at least that: counted from before the call that took or extended it). */
    public function remaining(): float
    {
        return $this->seconds - ($this->client->now() - $this->renewedAt);
    }

    public function __debugInfo(): array
    {
        return ['namespace' => $this->namespace, 'id' => $this->id, 'fence' => $this->fence, 'seconds' => $this->seconds, 'remaining' => $this->remaining()];
    }
}
