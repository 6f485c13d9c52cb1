<?php

declare(strict_types=1);

namespace Idem;

/**
 * The answer to operations->begin().
 *
 * $started: the caller holds the key ($token, $leaseExpiresAt, $fence) and must do the work, then
 * complete() or release(). $completed: the work was done before; $result is what it returned.
 * $raw is the whole answer as the API names it.
 */
final class BeginResult
{
    public readonly bool $started;
    public readonly bool $completed;

    /**
     * @param string|null $token proves the hold to complete(), release() and extend(); keep it private
     * @param int|null $fence the lease's fencing number: every later holder of the key gets a
     *                        greater one, so what the work writes to can refuse an older holder
     * @param array<string, mixed> $raw
     */
    public function __construct(
        public readonly string $status,
        public readonly string $id,
        #[\SensitiveParameter] public readonly ?string $token = null,
        public readonly ?string $leaseExpiresAt = null,
        public readonly ?int $fence = null,
        public readonly mixed $result = null,
        public readonly ?string $completedAt = null,
        public readonly ?string $expiresAt = null,
        public readonly array $raw = [],
    ) {
        $this->started = $status === 'started';
        $this->completed = $status === 'completed';
    }

    /** @param array<string, mixed> $body */
    public static function fromApi(array $body): self
    {
        $str = static fn (string $name): ?string => is_string($body[$name] ?? null) ? $body[$name] : null;
        return new self(
            (string) ($body['status'] ?? ''),
            (string) ($body['id'] ?? ''),
            $str('token'),
            $str('lease_expires_at'),
            is_int($body['fence'] ?? null) ? $body['fence'] : null,
            $body['result'] ?? null,
            $str('completed_at'),
            $str('expires_at'),
            $body,
        );
    }

    /** Never show the lease token in var_dump() or a log. */
    public function __debugInfo(): array
    {
        return [
            'status' => $this->status,
            'id' => $this->id,
            'leaseExpiresAt' => $this->leaseExpiresAt,
            'fence' => $this->fence,
            'result' => $this->result,
            'completedAt' => $this->completedAt,
            'expiresAt' => $this->expiresAt,
        ];
    }
}
