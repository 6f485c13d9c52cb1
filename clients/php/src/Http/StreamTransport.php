<?php

declare(strict_types=1);

namespace Idem\Http;

/**
 * HTTP over PHP's own streams (the http:// and https:// wrappers): no curl, no extension beyond
 * openssl for https. One connection per request (Connection: close), as PHP's wrapper has no
 * pool; a redirect is returned, never followed.
 *
 * The timeout bounds the connect, each wait for the answer's headers, and the whole body: the
 * body is read against a deadline of $timeout from the start of the call.
 */
final class StreamTransport implements Transport
{
    /**
     * @param array<string, mixed> $ssl PHP's ssl context options for https://, e.g.
     *                                  ['cafile' => '/etc/idem/ca.pem'] for a private CA
     */
    public function __construct(private readonly array $ssl = [])
    {
    }

    public function send(
        string $method,
        string $url,
        #[\SensitiveParameter] array $headers,
        ?string $body,
        float $timeout,
    ): Response {
        $started = hrtime(true);
        $lines = [];
        foreach ($headers as $name => $value) {
            $lines[] = "$name: $value";
        }
        $lines[] = 'Connection: close';
        $http = [
            'method' => $method,
            'header' => implode("\r\n", $lines),
            'ignore_errors' => true, // 4xx and 5xx answers are answers, not failures
            'follow_location' => 0,
            'protocol_version' => 1.1,
            'timeout' => $timeout,
        ];
        if ($body !== null) {
            $http['content'] = $body;
        }
        $context = stream_context_create(['http' => $http, 'ssl' => $this->ssl]);

        // PHP reports a refused connection or a reset as a warning; frameworks (Laravel) turn
        // warnings into exceptions of their own. Catch them here and say what happened once.
        $warnings = [];
        set_error_handler(static function (int $no, string $message) use (&$warnings): bool {
            $warnings[] = $message;
            return true;
        });
        try {
            $stream = fopen($url, 'rb', false, $context);
            if ($stream === false) {
                $elapsed = (hrtime(true) - $started) / 1e9;
                throw new TransportException(self::cause($warnings), $elapsed >= $timeout * 0.95);
            }
            try {
                $meta = stream_get_meta_data($stream);
                [$status, $reason, $responseHeaders] = self::parseHead($meta['wrapper_data'] ?? []);
                $content = self::readBody($stream, $started, $timeout);
            } finally {
                fclose($stream);
            }
        } finally {
            restore_error_handler();
        }
        return new Response($status, $responseHeaders, $content, $reason);
    }

    /** @param resource $stream */
    private static function readBody($stream, int $started, float $timeout): string
    {
        $content = '';
        while (!feof($stream)) {
            $left = $timeout - (hrtime(true) - $started) / 1e9;
            if ($left <= 0) {
                throw new TransportException("no complete answer within {$timeout}s", true);
            }
            stream_set_timeout($stream, (int) $left, (int) (($left - (int) $left) * 1e6));
            $chunk = fread($stream, 65536);
            if ($chunk === false) {
                throw new TransportException('the connection broke while reading the answer');
            }
            if (stream_get_meta_data($stream)['timed_out']) {
                throw new TransportException("no complete answer within {$timeout}s", true);
            }
            $content .= $chunk;
        }
        return $content;
    }

    /**
     * @param list<string> $lines the status line and headers, as PHP's http wrapper keeps them
     * @return array{int, string, array<string, string>}
     */
    private static function parseHead(array $lines): array
    {
        $status = 0;
        $reason = '';
        $headers = [];
        foreach ($lines as $line) {
            if (preg_match('#^HTTP/\S+\s+(\d{3})\s*(.*)$#', $line, $m)) {
                // A 100 Continue (or a redirect PHP followed) starts the headers over.
                $status = (int) $m[1];
                $reason = trim($m[2]);
                $headers = [];
                continue;
            }
            $colon = strpos($line, ':');
            if ($colon === false) {
                continue;
            }
            $name = strtolower(trim(substr($line, 0, $colon)));
            $value = trim(substr($line, $colon + 1));
            $headers[$name] = isset($headers[$name]) ? $headers[$name] . ', ' . $value : $value;
        }
        if ($status === 0) {
            throw new TransportException('the answer had no HTTP status line');
        }
        return [$status, $reason, $headers];
    }

    /** @param list<string> $warnings what PHP said, e.g. "fopen(http://…): Failed to open stream: Connection refused" */
    private static function cause(array $warnings): string
    {
        $causes = [];
        foreach ($warnings as $warning) {
            $cause = preg_replace(['/^\w+\(.*?\):\s*/', '/^failed to open stream:\s*/i'], '', $warning) ?? $warning;
            $causes[$cause] = true;
        }
        return $causes === [] ? 'no answer' : implode('; ', array_keys($causes));
    }
}
