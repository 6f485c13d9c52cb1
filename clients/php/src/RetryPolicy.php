<?php

declare(strict_types=1);

namespace Idem;

/**
 * When to retry, as data and pure functions (no I/O, no sleeping: the client does that).
 *
 * Attempt n (0-based) waits between d/2 and d where d = min(maxBackoff, backoff * 2^n); a
 * Retry-After from the server replaces that wait (never shortened, a little jitter added). A
 * Retry-After longer than maxRetryAfter is not waited for: the error is thrown instead. Only
 * connection errors and 502/503/504 are retried; every other answer is final.
 */
final class RetryPolicy
{
    /** A proxy that could not reach idem, idem's store unavailable, a gateway timeout. */
    public const RETRY_STATUSES = [502, 503, 504];

    /** The most the server holds a begin (wait_seconds 0-30). */
    public const MAX_SERVER_WAIT = 30;

    /** @var \Closure(): float a number in [0, 1) */
    private \Closure $rand;

    /** @param (callable(): float)|null $rand a number in [0, 1); tests pass their own */
    public function __construct(
        public readonly int $retries = 3,
        public readonly float $backoff = 0.25,
        public readonly float $maxBackoff = 8.0,
        public readonly float $maxRetryAfter = 60.0,
        ?callable $rand = null,
    ) {
        if ($retries < 0) {
            throw new \InvalidArgumentException('retries must be 0 or more');
        }
        $this->rand = $rand !== null
            ? \Closure::fromCallable($rand)
            : static fn (): float => mt_rand() / (mt_getrandmax() + 1);
    }

    public function withRetries(int $retries): self
    {
        return new self($retries, $this->backoff, $this->maxBackoff, $this->maxRetryAfter, $this->rand);
    }

    public function backoffDelay(int $attempt): float
    {
        $ceiling = min($this->maxBackoff, $this->backoff * 2.0 ** min($attempt, 30));
        return $ceiling / 2 + ($this->rand)() * $ceiling / 2;
    }

    /** Seconds to wait before retry number $attempt + 1, or null to give up. */
    public function delay(int $attempt, ?float $retryAfter): ?float
    {
        if ($attempt >= $this->retries) {
            return null;
        }
        if ($retryAfter !== null) {
            if ($retryAfter > $this->maxRetryAfter) {
                return null;
            }
            // Honour the server's wait; a little jitter on top spreads the clients out.
            return $retryAfter + ($this->rand)() * min(1.0, $retryAfter * 0.1);
        }
        return $this->backoffDelay($attempt);
    }

    public function forStatus(int $attempt, int $status, ?float $retryAfter): ?float
    {
        return in_array($status, self::RETRY_STATUSES, true) ? $this->delay($attempt, $retryAfter) : null;
    }

    public function forConnectionError(int $attempt): ?float
    {
        return $this->delay($attempt, null);
    }

    /** Retry-After as seconds from now (delta-seconds or an HTTP date); null if absent or unreadable. */
    public static function parseRetryAfter(?string $value, ?float $now = null): ?float
    {
        $value = trim((string) $value);
        if ($value === '') {
            return null;
        }
        if (is_numeric($value)) {
            $seconds = (float) $value;
            return is_finite($seconds) && $seconds >= 0 ? $seconds : null;
        }
        $when = \DateTimeImmutable::createFromFormat(\DateTimeInterface::RFC7231, $value, new \DateTimeZone('UTC'));
        if ($when === false) {
            return null;
        }
        return max(0.0, $when->getTimestamp() - ($now ?? microtime(true)));
    }

    /** wait_seconds for the next begin of operations->run(): as much of what is left as the server allows. */
    public static function serverWaitSeconds(float $remaining): int
    {
        return $remaining < 1 ? 0 : (int) min(self::MAX_SERVER_WAIT, $remaining);
    }

    /**
     * After a 409 in-progress answer to a begin: null to give up (the deadline has passed), 0 to
     * begin again at once, or seconds to sleep first. When the server really held the begin for
     * the $asked wait_seconds, the next begin goes at once (a begin waiting on the server is woken
     * the moment the holder completes; a client asleep is not). Otherwise the client sleeps,
     * honouring Retry-After but never past the deadline.
     */
    public function inProgressDelay(int $attempt, ?float $retryAfter, float $remaining, int $asked = 0, float $waited = 0.0): ?float
    {
        if ($remaining <= 0) {
            return null;
        }
        if ($asked > 0 && $waited >= $asked * 0.9) {
            return 0.0;
        }
        $wait = $retryAfter ?? $this->backoffDelay($attempt);
        return max(0.0, min($wait, $remaining));
    }
}
