<?php

declare(strict_types=1);

namespace Idem;

/**
 * A page of receipts, newest first. Pass $nextCursor as 'cursor' for the next page; it is null on
 * the last page. Each item keeps the API's field names (id, source, event_id, status, …).
 */
final class ReceiptPage
{
    /** @param list<array<string, mixed>> $items */
    public function __construct(
        public readonly array $items,
        public readonly ?string $nextCursor,
    ) {
    }
}
