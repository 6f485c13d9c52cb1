<?php

declare(strict_types=1);

namespace Idem;

/**
 * $idem->operations: a piece of work done once (docs/reference/api.md#operations).
 *
 * run() does it all: begin, call the function, complete with its result, release when it
 * throws, wait for another holder. begin/complete/release/extend are the four calls beneath it.
 */
final class Operations
{
    /** The server's default lease, used to pace heartbeats when none is given. */
    public const DEFAULT_LEASE_SECONDS = 60;

    /** @internal */
    public function __construct(private readonly Client $client)
    {
    }

    /**
     * Takes the key (->started, with ->token and ->fence) or gets the stored result
     * (->completed, ->result). Throws InProgressException while someone else holds it (after
     * waiting up to $waitSeconds, 0-30, on the server) and MismatchException for another $request.
     *
     * @param list<string>|null $parts
     * @param mixed $request any JSON describing the work; a later begin with another request is refused (422). null: matches any
     * @param string|null $clientToken sent on every attempt of this call (default: a random UUID),
     *                                 so that a retry of a begin that took the key gets the same lease
     */
    public function begin(
        string $ns,
        ?string $key = null,
        ?array $parts = null,
        mixed $request = null,
        ?int $leaseSeconds = null,
        ?int $ttlSeconds = null,
        ?int $waitSeconds = null,
        ?string $clientToken = null,
    ): BeginResult {
        $body = Key::body($key, $parts);
        if ($request !== null) {
            $body['request'] = $request;
        }
        if ($leaseSeconds !== null) {
            $body['lease_seconds'] = $leaseSeconds;
        }
        if ($ttlSeconds !== null) {
            $body['ttl_seconds'] = $ttlSeconds;
        }
        if ($waitSeconds) {
            $body['wait_seconds'] = $waitSeconds;
        }
        $body['client_token'] = $clientToken ?? Key::clientToken();
        $response = $this->client->call(
            'POST',
            '/v1/operations/' . Client::segment($ns) . '/begin',
            Client::encode($body),
            extraTimeout: (float) ($waitSeconds ?? 0),
            shape: Shape::begin(),
        );
        return BeginResult::fromApi(Client::json($response));
    }

    /**
     * Stores the work's JSON result; later begins get it. LeaseLostException if the token no
     * longer holds the key.
     *
     * @return array<string, mixed> the completed record
     */
    public function complete(string $ns, string $id, #[\SensitiveParameter] string $token, mixed $result = null): array
    {
        $body = Client::encode(['token' => $token, 'result' => $result]);
        return Client::json($this->client->call('POST', $this->path($ns, $id) . '/complete', $body, shape: Shape::completed()));
    }

    /** Gives the key up: the work failed and may run again. */
    public function release(string $ns, string $id, #[\SensitiveParameter] string $token): void
    {
        $this->client->call('POST', $this->path($ns, $id) . '/release', Client::encode(['token' => $token]));
    }

    /**
     * A heartbeat: hold the key $leaseSeconds more (default: the server's, 60).
     *
     * @return array<string, mixed> ['lease_expires_at' => …]
     */
    public function extend(string $ns, string $id, #[\SensitiveParameter] string $token, ?int $leaseSeconds = null): array
    {
        $body = ['token' => $token];
        if ($leaseSeconds !== null) {
            $body['lease_seconds'] = $leaseSeconds;
        }
        return Client::json($this->client->call('POST', $this->path($ns, $id) . '/extend', Client::encode($body), shape: self::extended()));
    }

    /**
     * One heartbeat: a single attempt (no retries, no Retry-After wait: Lease tries again on a
     * pace of its own) with its own timeout.
     *
     * @internal
     */
    public function extendOnce(string $ns, string $id, #[\SensitiveParameter] string $token, int $leaseSeconds, float $timeout): void
    {
        $body = Client::encode(['token' => $token, 'lease_seconds' => $leaseSeconds]);
        $this->client->call('POST', $this->path($ns, $id) . '/extend', $body, shape: self::extended(), timeout: $timeout, retries: 0);
    }

    /**
     * The operation (status in_progress or completed; never its token), or null.
     *
     * @param list<string>|null $parts
     * @return array<string, mixed>|null
     */
    public function get(string $ns, ?string $key = null, ?array $parts = null, ?string $id = null): ?array
    {
        $response = $this->client->call('GET', $this->path($ns, Key::resolve($id, $key, $parts)), absentOk: true, shape: Shape::of(['status' => 'string', 'id' => 'string']));
        return $response->status === 404 ? null : Client::json($response);
    }

    /**
     * Forgets a completed result: true if it existed, false if absent. InProgressException while
     * the key is held.
     *
     * @param list<string>|null $parts
     */
    public function delete(string $ns, ?string $key = null, ?array $parts = null, ?string $id = null): bool
    {
        return $this->client->call('DELETE', $this->path($ns, Key::resolve($id, $key, $parts)), absentOk: true)->status !== 404;
    }

    /**
     * Runs $fn once per key and returns its result.
     *
     * Begins the operation; if this caller holds the key, calls $fn, stores its return value (any
     * JSON value) and returns it as stored (JSON in, JSON out: objects come back as associative
     * arrays, the same on every call). If the work was done before, returns the stored result
     * without calling $fn. If $fn throws, the key is released (a later call runs it again) and
     * the exception propagates. While another caller holds the key, waits for it (up to
     * $waitTimeout seconds, default the client's) and then throws InProgressException.
     *
     * PHP has no threads, so nothing extends the lease behind $fn's back. $fn may take a Lease
     * argument and call $lease->heartbeat() in its loops (it extends once a third of the lease has
     * passed, counted from before the begin was sent, and costs nothing otherwise; a failed
     * extension is tried again every 250 ms); or pass a $leaseSeconds longer than the work can
     * take. If another caller takes the key after the lease ran out, heartbeat() throws
     * LeaseLostException, and so does complete() here.
     *
     * @param callable(): mixed|callable(Lease): mixed $fn
     * @param list<string>|null $parts
     */
    public function run(
        string $ns,
        callable $fn,
        ?string $key = null,
        ?array $parts = null,
        mixed $request = null,
        ?int $leaseSeconds = null,
        ?int $ttlSeconds = null,
        ?float $waitTimeout = null,
        ?string $clientToken = null,
    ): mixed {
        // One token for the whole call: every begin it sends, waiting included, is the same request.
        $clientToken ??= Key::clientToken();
        $sentAt = 0.0;
        $begun = $this->beginWaiting($ns, $key, $parts, $request, $leaseSeconds, $ttlSeconds, $waitTimeout, $clientToken, $sentAt);
        if (!$begun->started) {
            return $begun->result;
        }
        $token = (string) $begun->token;
        $lease = new Lease($this, $ns, $begun->id, $token, $begun->fence, $leaseSeconds ?? self::DEFAULT_LEASE_SECONDS, $sentAt, $this->client);
        try {
            $stored = self::roundtrip(self::invoke($fn, $lease));
        } catch (\Throwable $e) {
            if (!$e instanceof LeaseLostException) { // a lost lease has nothing left to release
                $this->releaseQuietly($ns, $begun->id, $token);
            }
            throw $e;
        }
        $this->complete($ns, $begun->id, $token, $stored);
        return $stored;
    }

    /** @param list<string>|null $parts */
    private function beginWaiting(
        string $ns,
        ?string $key,
        ?array $parts,
        mixed $request,
        ?int $leaseSeconds,
        ?int $ttlSeconds,
        ?float $waitTimeout,
        string $clientToken,
        float &$sentAt,
    ): BeginResult {
        $deadline = $this->client->now() + ($waitTimeout ?? $this->client->waitTimeout);
        for ($attempt = 0;; $attempt++) {
            $asked = RetryPolicy::serverWaitSeconds($deadline - $this->client->now());
            $sentAt = $this->client->now();
            try {
                return $this->begin($ns, $key, $parts, $request, $leaseSeconds, $ttlSeconds, $asked, $clientToken);
            } catch (InProgressException $e) {
                $now = $this->client->now();
                $delay = $this->client->policy()->inProgressDelay($attempt, $e->retryAfter, $deadline - $now, $asked, $now - $sentAt);
                if ($delay === null) {
                    throw $e;
                }
            }
            if ($delay > 0) {
                $this->client->sleep($delay);
            }
        }
    }

    /** Calls $fn with the lease when it declares a parameter, without otherwise. */
    private static function invoke(callable $fn, Lease $lease): mixed
    {
        $closure = \Closure::fromCallable($fn);
        $wants = (new \ReflectionFunction($closure))->getNumberOfParameters() > 0;
        return $wants ? $closure($lease) : $closure();
    }

    /** $value as it will come back from the server once stored: JSON in, JSON out. */
    private static function roundtrip(mixed $value): mixed
    {
        return json_decode(Client::encode($value), true, 512, JSON_THROW_ON_ERROR | JSON_BIGINT_AS_STRING);
    }

    private function releaseQuietly(string $ns, string $id, #[\SensitiveParameter] string $token): void
    {
        try {
            $this->release($ns, $id, $token);
        } catch (IdemException $e) {
            // The function's own exception matters more; the lease ends by itself.
            error_log("idem: could not release operation $ns/$id: " . $e->getMessage());
        }
    }

    private static function extended(): Shape
    {
        return Shape::of(['lease_expires_at' => 'string']);
    }

    private function path(string $ns, string $id): string
    {
        return '/v1/operations/' . Client::segment($ns) . '/' . Client::segment($id);
    }
}
