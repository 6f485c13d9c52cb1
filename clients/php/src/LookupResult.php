<?php

declare(strict_types=1);

namespace Idem;

/** One answer of claims->lookup(): $record (the API's field names) is set when $exists is true. */
final class LookupResult
{
    /** @param array<string, mixed>|null $record */
    public function __construct(
        public readonly string $id,
        public readonly bool $exists,
        public readonly ?array $record = null,
    ) {
    }

    /** @param array<string, mixed> $body */
    public static function fromApi(array $body): self
    {
        $record = $body['record'] ?? null;
        return new self((string) ($body['id'] ?? ''), (bool) ($body['exists'] ?? false), is_array($record) ? $record : null);
    }
}
