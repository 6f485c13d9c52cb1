<?php

declare(strict_types=1);

namespace Idem\Http;

/**
 * Sends one HTTP request. The client does everything else (retries, errors, JSON); a transport
 * only moves bytes. StreamTransport (PHP's streams, no extension needed) is the default; write
 * your own to go through Guzzle, a PSR-18 client or a test double.
 */
interface Transport
{
    /**
     * @param array<string, string> $headers
     * @param float $timeout seconds for the whole exchange
     * @throws TransportException when no answer came (refused, reset, timed out)
     */
    public function send(
        string $method,
        string $url,
        #[\SensitiveParameter] array $headers,
        ?string $body,
        float $timeout,
    ): Response;
}
