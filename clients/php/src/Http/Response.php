<?php

declare(strict_types=1);

namespace Idem\Http;

/** One HTTP answer as a Transport returns it. */
final class Response
{
    /** @var array<string, string> header names in lowercase; a repeated header's values joined by ", " */
    public readonly array $headers;

    /** @param array<string, string> $headers */
    public function __construct(
        public readonly int $status,
        array $headers = [],
        public readonly string $body = '',
        public readonly string $reason = '',
    ) {
        $lower = [];
        foreach ($headers as $name => $value) {
            $name = strtolower((string) $name);
            $lower[$name] = isset($lower[$name]) ? $lower[$name] . ', ' . $value : (string) $value;
        }
        $this->headers = $lower;
    }

    public function header(string $name): ?string
    {
        return $this->headers[strtolower($name)] ?? null;
    }
}
