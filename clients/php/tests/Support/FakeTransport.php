<?php

declare(strict_types=1);

namespace Idem\Tests\Support;

use Idem\Http\Response;
use Idem\Http\Transport;
use Idem\Http\TransportException;

/** A Transport in memory: answers what it is given, in order, and records what it was sent. */
final class FakeTransport implements Transport
{
    /** @var list<array{method: string, url: string, headers: array<string, string>, body: ?string, timeout: float}> */
    public array $sent = [];

    /** @var list<Response|TransportException> */
    private array $answers;

    public function __construct(Response|TransportException ...$answers)
    {
        $this->answers = $answers;
    }

    /** A JSON (or problem+json) answer. */
    public static function json(int $status, mixed $body, array $headers = []): Response
    {
        $type = $status >= 400 ? 'application/problem+json' : 'application/json';
        return new Response($status, $headers + ['Content-Type' => $type], json_encode($body), self::reason($status));
    }

    public static function problem(int $status, string $kind, string $detail = '', array $headers = [], ?string $field = null): Response
    {
        $body = ['type' => "urn:idem:problem:$kind", 'title' => self::reason($status), 'status' => $status, 'detail' => $detail];
        if ($field !== null) {
            $body['field'] = $field;
        }
        return self::json($status, $body, $headers);
    }

    public function send(string $method, string $url, #[\SensitiveParameter] array $headers, ?string $body, float $timeout): Response
    {
        $this->sent[] = compact('method', 'url', 'headers', 'body', 'timeout');
        $answer = array_shift($this->answers);
        if ($answer === null) {
            throw new \LogicException("FakeTransport: no answer left for $method $url");
        }
        if ($answer instanceof TransportException) {
            throw $answer;
        }
        return $answer;
    }

    /** The JSON body of the n-th request sent. */
    public function body(int $n): mixed
    {
        return json_decode((string) $this->sent[$n]['body'], true);
    }

    private static function reason(int $status): string
    {
        return [200 => 'OK', 201 => 'Created', 204 => 'No Content', 400 => 'Bad Request', 401 => 'Unauthorized', 403 => 'Forbidden', 404 => 'Not Found', 409 => 'Conflict', 422 => 'Unprocessable Entity', 500 => 'Internal Server Error', 502 => 'Bad Gateway', 503 => 'Service Unavailable', 504 => 'Gateway Timeout'][$status] ?? '';
    }
}
