<?php

declare(strict_types=1);

namespace Idem;

/**
 * A page of claims, in the order of their parts. Pass $next as after: for the next page; it is
 * null on the last page. Each item is a record with the API's field names (namespace, id, parts,
 * data, created_at, expires_at).
 */
final class ClaimPage
{
    /** @param list<array<string, mixed>> $items */
    public function __construct(
        public readonly array $items,
        public readonly ?string $next,
    ) {
    }
}
