<?php

declare(strict_types=1);

namespace Idem;

/**
 * The answer to a claim: $claimed is true for the one caller that created the record (and for
 * that caller's retries with the same clientToken); $record is the record, the existing one,
 * unchanged, when $claimed is false.
 *
 * The record keeps the API's field names: ['namespace', 'id', 'parts', 'data', 'created_at',
 * 'expires_at'] (RFC 3339 UTC; expires_at null = never).
 */
final class ClaimResult
{
    /** The record's id (the same as Idem\claimId() of its parts). */
    public readonly string $id;

    /** @param array<string, mixed> $record */
    public function __construct(
        public readonly bool $claimed,
        public readonly array $record,
    ) {
        $this->id = (string) ($record['id'] ?? '');
    }

    /** @param array<string, mixed> $body the API's {"claimed": bool, ...record} */
    public static function fromApi(array $body): self
    {
        $claimed = (bool) ($body['claimed'] ?? false);
        unset($body['claimed']);
        return new self($claimed, $body);
    }
}
