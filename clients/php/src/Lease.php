<?php

declare(strict_types=1);

namespace Idem;

/**
 * The hold operations->run() took on a key, handed to the function when it takes an argument:
 *
 *     $idem->operations->run('imports', key: $file, leaseSeconds: 60, fn: function (Idem\Lease $lease) use ($rows) {
 *         foreach ($rows as $row) {
 *             importRow($row);
 *             $lease->heartbeat();   // extends the lease once a third of it has passed; free otherwise
 *         }
 *     });
 *
 * PHP runs one thing at a time, so the lease is extended when the work says so, not by a
 * background heartbeat. It follows the gateway's rule: the lease is counted from before the begin
 * was sent (a begin retried or held up on the way used part of it) and extended every third of
 * it, each extension's lease counted again from before that extend was sent; an extension that
 * fails (no answer, a 5xx, a timeout: one attempt each, at most a third of the lease) is tried
 * again every 250 ms, within heartbeat(), until one gets through or the lease as counted here has
 * ended. $fence is the lease's fencing number (store it with what the work writes, and refuse a
 * smaller one).
 */
final class Lease
{
    /** How soon an extension that failed is tried again, in seconds. */
    public const RETRY_BEAT = 0.25;

    /** When the begin, or the last extension that got through, was sent (the client's clock). */
    private float $renewedAt;
    /** When the last extension that failed was sent; null when the last one got through. */
    private ?float $failedAt = null;
    private ?IdemException $failure = null;

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
     * Extends the lease when a third of it has passed since it was taken or last extended (or, after
     * an extension failed, when 250 ms have passed since); answers whether it did. While extensions
     * fail it tries again every 250 ms, here, until one gets through or the lease, as counted here,
     * has ended: then it answers false, and the next heartbeat() tries again (idem keeps a lease
     * that ran out for its holder until another begin takes the key). Throws LeaseLostException
     * when another caller has taken the key: stop the work (run() rethrows it).
     */
    public function heartbeat(): bool
    {
        $due = $this->failedAt === null ? $this->renewedAt + $this->seconds / 3 : $this->failedAt + self::RETRY_BEAT;
        if ($this->client->now() < $due) {
            return false;
        }
        return $this->renew();
    }

    /**
     * Extends the lease now, by its full length, trying again every 250 ms while it fails until the
     * lease has ended; then throws the last failure. LeaseLostException when another caller has
     * taken the key.
     */
    public function extend(): void
    {
        if (!$this->renew()) {
            throw $this->failure ?? new IdemException(0, 'about:blank', 'Lease not extended');
        }
    }

    /** Seconds left of the lease, as this process counts them (at least that: counted from before the call that took or extended it); negative once it has ended. */
    public function remaining(): float
    {
        return $this->seconds - ($this->client->now() - $this->renewedAt);
    }

    public function __debugInfo(): array
    {
        return ['namespace' => $this->namespace, 'id' => $this->id, 'fence' => $this->fence, 'seconds' => $this->seconds, 'remaining' => $this->remaining()];
    }

    /** One extension, tried again every 250 ms while it fails and the lease lasts: whether one got through. */
    private function renew(): bool
    {
        $timeout = min($this->client->timeout, $this->seconds / 3);
        for (;;) {
            $sentAt = $this->client->now();
            try {
                $this->operations->extendOnce($this->namespace, $this->id, $this->token, $this->seconds, $timeout);
                $this->renewedAt = $sentAt;
                $this->failedAt = $this->failure = null;
                return true;
            } catch (LeaseLostException $e) {
                throw $e;
            } catch (IdemException $e) {
                $this->failedAt = $sentAt;
                $this->failure = $e;
            }
            $next = $sentAt + self::RETRY_BEAT;
            if ($next >= $this->renewedAt + $this->seconds) {
                return false; // the lease has ended as counted here: the next heartbeat() tries again
            }
            $this->client->sleep(max(0.0, $next - $this->client->now()));
        }
    }
}
