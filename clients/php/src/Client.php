<?php

declare(strict_types=1);

namespace Idem;

use Idem\Http\Response;
use Idem\Http\StreamTransport;
use Idem\Http\Transport;
use Idem\Http\TransportException;

/**
 * The idem client: $idem->claims, $idem->operations, $idem->receipts.
 *
 *     $idem = new Idem\Client('http://127.0.0.1:7070', token: getenv('IDEM_TOKEN') ?: null);
 *     $r = $idem->claims->claim('survey', parts: ['scenario-1', 'user-3', 'node-2'], data: ['answer' => 'A']);
 *     $r->claimed; $r->record['id'];
 *
 * Every call is retried on connection errors and 502/503/504 (exponential backoff with jitter,
 * honouring Retry-After), never on another answer; each attempt has a timeout. A claim, a batch
 * and a begin carry a client_token made once per call and sent unchanged on each retry, so that a
 * retry whose first answer was lost learns what it did.
 */
final class Client
{
    /** The client's version: the project's (server and every client share it). */
    public const VERSION = '0.1.0';

    /** Where the client looks when no URL is given and IDEM_URL is unset. */
    public const DEFAULT_URL = 'http://127.0.0.1:7070';

    public readonly Claims $claims;
    public readonly Operations $operations;
    public readonly Receipts $receipts;

    /** The server's base URL, without a trailing slash. */
    public readonly string $url;
    private readonly RetryPolicy $policy;
    private readonly Transport $transport;
    /** @var array<string, string> */
    private readonly array $headers;
    /** @var \Closure(float): void */
    private readonly \Closure $sleep;
    /** @var \Closure(): float */
    private readonly \Closure $clock;
    /** @var (\Closure(): float)|null */
    private readonly ?\Closure $rand;

    /**
     * @param string|null $url the server, e.g. http://127.0.0.1:7070; default: the IDEM_URL
     *                         environment variable, else http://127.0.0.1:7070
     * @param string|null $token the bearer token when the server has [auth] tokens; default: the
     *                           IDEM_TOKEN environment variable, if set ('' sends none)
     * @param float $timeout seconds per HTTP attempt (a begin that waits on the server gets its wait on top)
     * @param int $retries how many times a call is retried on connection errors and 502/503/504
     * @param float $waitTimeout how long operations->run() waits, in all, for another holder of the key
     * @param array<string, string> $headers sent with every request
     * @param Transport|null $transport how requests are sent (default: PHP's streams)
     * @param (callable(float): void)|null $sleep waits between retries (tests pass their own)
     * @param (callable(): float)|null $clock a monotonic clock in seconds (tests pass their own)
     * @param (callable(): float)|null $rand jitter, a number in [0, 1)
     */
    public function __construct(
        ?string $url = null,
        #[\SensitiveParameter] ?string $token = null,
        public readonly float $timeout = 10.0,
        int $retries = 3,
        float $backoff = 0.25,
        float $maxBackoff = 8.0,
        float $maxRetryAfter = 60.0,
        public readonly float $waitTimeout = 90.0,
        array $headers = [],
        ?Transport $transport = null,
        ?callable $sleep = null,
        ?callable $clock = null,
        ?callable $rand = null,
    ) {
        $fromEnv = $url === null ? getenv('IDEM_URL') : false;
        $this->url = self::checkUrl($url ?? ($fromEnv ?: self::DEFAULT_URL), $fromEnv ? 'IDEM_URL' : 'the URL');
        if ($token === null && !array_key_exists('authorization', array_change_key_case($headers))) {
            $token = getenv('IDEM_TOKEN') ?: null;
        }
        $this->rand = $rand !== null ? \Closure::fromCallable($rand) : null;
        $this->policy = new RetryPolicy($retries, $backoff, $maxBackoff, $maxRetryAfter, $this->rand);
        $this->transport = $transport ?? new StreamTransport();
        $all = $headers + ['Accept' => 'application/json', 'User-Agent' => 'idem-client-php/' . self::VERSION];
        if ($token !== null && $token !== '') {
            $all['Authorization'] = "Bearer $token";
        }
        $this->headers = $all;
        $this->sleep = $sleep !== null
            ? \Closure::fromCallable($sleep)
            : static function (float $seconds): void {
                usleep((int) round($seconds * 1e6));
            };
        $this->clock = $clock !== null ? \Closure::fromCallable($clock) : static fn (): float => hrtime(true) / 1e9;
        $this->claims = new Claims($this);
        $this->operations = new Operations($this);
        $this->receipts = new Receipts($this);
    }

    /**
     * The same client with other settings for some calls:
     * $idem->withOptions(timeout: 2, retries: 0)->claims->claim(…).
     */
    public function withOptions(?float $timeout = null, ?int $retries = null, ?float $waitTimeout = null): self
    {
        return new self(
            $this->url,
            '', // the Authorization header is among $this->headers: IDEM_TOKEN is not read again
            $timeout ?? $this->timeout,
            $retries ?? $this->policy->retries,
            $this->policy->backoff,
            $this->policy->maxBackoff,
            $this->policy->maxRetryAfter,
            $waitTimeout ?? $this->waitTimeout,
            $this->headers,
            $this->transport,
            $this->sleep,
            $this->clock,
            $this->rand,
        );
    }

    /** Never show the token in var_dump(), print_r() or a log. */
    public function __debugInfo(): array
    {
        return ['url' => $this->url, 'timeout' => $this->timeout, 'retries' => $this->policy->retries];
    }

    /**
     * Sends one call, retrying as the policy says; answers the final response. An error answer
     * throws the IdemException its problem calls for, except idem's own 404 not-found when
     * $absentOk (get and delete read it as "absent"). A 2xx answer whose body has not $shape
     * (`200 {}`, an HTML page) is not idem's: it throws the not-idem IdemException naming the URL.
     *
     * @internal
     * @param array<string, string|list<string>> $query a list is the parameter repeated, in order
     * @param float|null $timeout this call's per-attempt timeout instead of the client's
     * @param int|null $retries this call's retries instead of the client's
     * @throws IdemException
     */
    public function call(
        string $method,
        string $path,
        ?string $body = null,
        array $query = [],
        bool $absentOk = false,
        float $extraTimeout = 0.0,
        ?Shape $shape = null,
        ?float $timeout = null,
        ?int $retries = null,
    ): Response {
        $url = $this->url . $path . ($query === [] ? '' : '?' . self::query($query));
        $headers = $body === null ? $this->headers : $this->headers + ['Content-Type' => 'application/json'];
        $policy = $retries === null ? $this->policy : $this->policy->withRetries($retries);
        for ($attempt = 0;; $attempt++) {
            try {
                $response = $this->transport->send($method, $url, $headers, $body, ($timeout ?? $this->timeout) + $extraTimeout);
            } catch (TransportException $e) {
                $delay = $policy->forConnectionError($attempt);
                if ($delay === null) {
                    throw $this->connectionError($e, $method, $path, $attempt + 1);
                }
                ($this->sleep)($delay);
                continue;
            }
            $retryAfter = RetryPolicy::parseRetryAfter($response->header('retry-after'));
            $delay = $policy->forStatus($attempt, $response->status, $retryAfter);
            if ($delay === null) {
                break;
            }
            ($this->sleep)($delay);
        }
        if ($response->status >= 400 && !($absentOk && self::isAbsent($response))) {
            throw IdemException::fromResponse($response, $this->where(), "$method $path");
        }
        if ($shape !== null && $response->status >= 200 && $response->status < 300 && !$shape->fits($response->body)) {
            throw IdemException::notIdemAnswer($response, $this->where(), "$method $path", $shape->expected);
        }
        return $response;
    }

    /**
     * The answer's body as JSON: an array (a JSON object as an associative array).
     *
     * @internal
     * @return array<mixed>
     */
    public static function json(Response $response): array
    {
        try {
            $body = json_decode($response->body, true, 512, JSON_THROW_ON_ERROR | JSON_BIGINT_AS_STRING);
        } catch (\JsonException $e) {
            throw new IdemException($response->status, 'about:blank', 'Invalid response', "the server's answer is not JSON", null, null, $e);
        }
        if (!is_array($body)) {
            throw new IdemException($response->status, 'about:blank', 'Invalid response', 'expected a JSON object');
        }
        return $body;
    }

    /**
     * Strict JSON for a request body: no NaN or INF, slashes and Unicode as they are.
     *
     * @internal
     */
    public static function encode(mixed $value): string
    {
        return json_encode($value, JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_PRESERVE_ZERO_FRACTION);
    }

    /**
     * A path segment (namespace, id, source), escaped.
     *
     * @internal
     */
    public static function segment(string $value): string
    {
        if ($value === '') {
            throw new \InvalidArgumentException('path segments (namespace, id, source) must be non-empty strings');
        }
        return rawurlencode($value);
    }

    /** @internal */
    public function sleep(float $seconds): void
    {
        ($this->sleep)($seconds);
    }

    /** @internal */
    public function now(): float
    {
        return ($this->clock)();
    }

    /** @internal */
    public function policy(): RetryPolicy
    {
        return $this->policy;
    }

    private static function isAbsent(Response $response): bool
    {
        if ($response->status !== 404) {
            return false;
        }
        $body = json_decode($response->body, true);
        return is_array($body) && ($body['type'] ?? null) === IdemException::NOT_FOUND;
    }

    /**
     * A query string: name=value pairs, RFC 3986-escaped; a list value repeats its name.
     *
     * @param array<string, string|list<string>> $query
     */
    private static function query(array $query): string
    {
        $pairs = [];
        foreach ($query as $name => $values) {
            foreach ((array) $values as $value) {
                $pairs[] = rawurlencode((string) $name) . '=' . rawurlencode((string) $value);
            }
        }
        return implode('&', $pairs);
    }

    /** The base URL as an error shows it: without any user, password or query. */
    private function where(): string
    {
        $parts = parse_url($this->url);
        return ($parts['scheme'] ?? 'http') . '://' . ($parts['host'] ?? '') . (isset($parts['port']) ? ':' . $parts['port'] : '') . ($parts['path'] ?? '');
    }

    private function connectionError(TransportException $e, string $method, string $path, int $attempts): ConnectionException
    {
        $where = $this->where();
        $cause = $e->getMessage();
        if ($e->timedOut) {
            $reason = "no answer in time ($cause)";
        } elseif (stripos($cause, 'refused') !== false) {
            $reason = "connection refused (is idem running there?) [$cause]";
        } else {
            $reason = $cause;
        }
        $detail = "cannot reach idem at $where: $reason ($method $path, $attempts attempt" . ($attempts === 1 ? '' : 's') . ')';
        if (!$e->timedOut) {
            $detail .= '; to point the client elsewhere, give it url: or set IDEM_URL';
        }
        return new ConnectionException(
            0,
            $e->timedOut ? IdemException::TIMEOUT : IdemException::CONNECTION,
            $e->timedOut ? 'Timed out' : 'Connection failed',
            $detail,
            null,
            null,
            $e,
        );
    }

    private static function checkUrl(string $url, string $name = 'the URL'): string
    {
        $parts = parse_url($url);
        if ($parts === false || !in_array($parts['scheme'] ?? '', ['http', 'https'], true) || ($parts['host'] ?? '') === '') {
            throw new \InvalidArgumentException("$name must be http:// or https://, such as http://127.0.0.1:7070");
        }
        if (isset($parts['user']) || isset($parts['pass'])) {
            // Credentials belong in token:, never in a URL that may be logged.
            throw new \InvalidArgumentException('put credentials in token:, not in the URL');
        }
        return rtrim($url, '/');
    }
}
