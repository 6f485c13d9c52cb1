<?php

declare(strict_types=1);

namespace Idem;

use Idem\Http\Response;

/**
 * A problem reported by idem (an RFC 9457 application/problem+json answer), or, with status 0, a
 * call that got no answer at all (see ConnectionException).
 *
 * The subclass says what kind of problem it is: InProgressException (409 in-progress),
 * LeaseLostException (409 lease-lost), MismatchException (422), UnavailableException (503),
 * UnauthorizedException (401), ForbiddenException (403). Catch IdemException for all of them.
 */
class IdemException extends \RuntimeException
{
    public const IN_PROGRESS = 'urn:idem:problem:in-progress';
    public const LEASE_LOST = 'urn:idem:problem:lease-lost';
    public const FINGERPRINT_MISMATCH = 'urn:idem:problem:fingerprint-mismatch';
    public const FORBIDDEN = 'urn:idem:problem:forbidden';
    /** A 503: the store could not be used; nothing was changed. */
    public const STORE_UNAVAILABLE = 'urn:idem:problem:store-unavailable';
    /**
     * A 503: the store's answer was lost after a write was sent; it may or may not have been made.
     * The client retries it with the call's own client token, which tells which; this type
     * reaches the caller only once the retries ran out.
     */
    public const OUTCOME_UNKNOWN = 'urn:idem:problem:outcome-unknown';
    /** idem's "no such record": the only 404 that get() and delete() read as absent. */
    public const NOT_FOUND = 'urn:idem:problem:not-found';
    /** A 404 for a path that is no route at all (a wrong base URL): always an error. */
    public const NO_SUCH_ROUTE = 'urn:idem:problem:no-such-route';
    /** The type of a ConnectionException: no answer (refused, reset, ...). */
    public const CONNECTION = 'urn:idem:client:connection-error';
    /** The type of a ConnectionException: no answer within the timeout. */
    public const TIMEOUT = 'urn:idem:client:timeout';

    /**
     * @param int $status the HTTP status; 0 when no answer came
     * @param string $type the problem type URI; "about:blank" when the body was not a problem
     * @param string|null $field for a bad request, the field at fault: "parts[0]", "items[3].key"
     * @param float|null $retryAfter the answer's Retry-After in seconds, when it had one
     * @param bool $notIdem the answer was not an idem problem document (application/problem+json
     *                      with a urn:idem:problem: type), such as another web server's 404 page:
     *                      the client's URL (or IDEM_URL) does not look like idem
     */
    public function __construct(
        public readonly int $status,
        public readonly string $type = 'about:blank',
        public readonly string $title = '',
        public readonly string $detail = '',
        public readonly ?string $field = null,
        public readonly ?float $retryAfter = null,
        ?\Throwable $previous = null,
        public readonly bool $notIdem = false,
    ) {
        parent::__construct(self::describe($status, $title, $detail, $field), $status, $previous);
    }

    private static function describe(int $status, string $title, string $detail, ?string $field): string
    {
        $head = $status !== 0 ? trim("$status $title") : $title;
        $text = $detail !== '' ? "$head: $detail" : $head;
        if ($field !== null && $field !== '' && !str_contains($detail, $field)) {
            $text .= " (field: $field)";
        }
        return $text;
    }

    /**
     * The exception for an error answer (problem+json or not): the subclass its status and type
     * call for. One that is not an idem problem document says that $base does not look like idem.
     *
     * @param string $what the call, e.g. "POST /v1/claims/survey"
     */
    public static function fromResponse(Response $response, string $base = 'the server', string $what = 'a call'): self
    {
        $status = $response->status;
        $retryAfter = RetryPolicy::parseRetryAfter($response->header('retry-after'));
        $body = null;
        if ($response->body !== '') {
            try {
                $body = json_decode($response->body, true, 512, JSON_THROW_ON_ERROR);
            } catch (\JsonException) {
                $body = null;
            }
        }
        if (is_array($body) && !array_is_list($body)) {
            $type = self::str($body['type'] ?? null) ?: 'about:blank';
            $title = self::str($body['title'] ?? null) ?: $response->reason;
            $detail = self::str($body['detail'] ?? null);
            $field = is_string($body['field'] ?? null) ? $body['field'] : null;
        } else {
            $type = 'about:blank';
            $title = $response->reason;
            $detail = substr($response->body, 0, 200);
            $field = null;
        }
        $notIdem = !self::isIdemProblem($response, $body);
        if ($notIdem) {
            $theirs = is_array($body) && $detail !== '' ? " [its detail: $detail]" : '';
            $detail = "$base answered $status to $what without an idem problem document: it does not look like idem "
                . "(check the client's url: or IDEM_URL)$theirs";
        }
        $class = match (true) {
            $status === 401 => UnauthorizedException::class,
            $status === 403 => ForbiddenException::class,
            $status === 409 && $type === self::IN_PROGRESS => InProgressException::class,
            $status === 409 && $type === self::LEASE_LOST => LeaseLostException::class,
            $status === 422 => MismatchException::class,
            $status === 503 => UnavailableException::class,
            default => self::class,
        };
        return new $class($status, $type, $title, $detail, $field, $retryAfter, null, $notIdem);
    }

    /**
     * The exception for a 2xx answer without the fields the call needs (`200 {}`, an HTML page
     * from a server that answers anything): not idem's answer, so not a result either. The
     * not-idem exception naming $base, as for an error answer that is not an idem problem document.
     *
     * @param string $what the call, e.g. "POST /v1/claims/survey"
     * @param string $expected the fields the call needs, e.g. "{ claimed: boolean, id: string }"
     */
    public static function notIdemAnswer(Response $response, string $base, string $what, string $expected): self
    {
        $status = $response->status;
        if (trim($response->body) === '') {
            $got = "with an empty body (expected $expected)";
        } else {
            try {
                json_decode($response->body, false, 512, JSON_THROW_ON_ERROR);
                $got = "without the fields of idem's answer (expected $expected)";
            } catch (\JsonException) {
                $type = $response->header('content-type') ?? 'no Content-Type';
                $got = "with a body that is not JSON ($type)";
            }
        }
        $detail = "$base answered $status to $what $got: it does not look like idem (check the client's url: or IDEM_URL)";
        return new self($status, 'about:blank', 'Invalid response', $detail, null, null, null, true);
    }

    /**
     * Whether an error answer is idem's own: application/problem+json whose type is one of idem's
     * (urn:idem:problem:…). Anything else (a web server's 404 page, a proxy's error) is not idem's.
     */
    private static function isIdemProblem(Response $response, mixed $body): bool
    {
        $contentType = strtolower(trim((string) $response->header('content-type')));
        $type = is_array($body) ? ($body['type'] ?? null) : null;
        return str_starts_with($contentType, 'application/problem+json') && is_string($type) && str_starts_with($type, 'urn:idem:problem:');
    }

    private static function str(mixed $value): string
    {
        return is_string($value) ? $value : '';
    }
}
