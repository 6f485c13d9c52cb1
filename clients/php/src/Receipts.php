<?php

declare(strict_types=1);

namespace Idem;

/**
 * $idem->receipts: event receipts, dead letters and replay (docs/reference/api.md#events).
 * Receipts keep the API's field names (id, source, event_id, status, attempts, …).
 */
final class Receipts
{
    /** The filter keys list() and iterate() take, and the query parameter each one is. */
    private const LIST_FILTER = ['source' => 'source', 'status' => 'status', 'eventId' => 'event_id', 'limit' => 'limit', 'cursor' => 'cursor'];

    /** The filter keys replayMatching() and countMatching() take, and the body member each one is. */
    private const MATCH_FILTER = ['source' => 'source', 'status' => 'status', 'eventId' => 'event_id', 'createdBefore' => 'created_before', 'createdAfter' => 'created_after'];

    /** @internal */
    public function __construct(private readonly Client $client)
    {
    }

    /**
     * One page of receipts, newest first: ->items and ->nextCursor.
     *
     * @param array{source?: string, status?: string, eventId?: string, limit?: int, cursor?: string|null} $filter
     */
    public function list(array $filter = []): ReceiptPage
    {
        $query = [];
        foreach (self::pick($filter, self::LIST_FILTER) as $name => $value) {
            $query[$name] = (string) $value;
        }
        $response = $this->client->call('GET', '/v1/receipts', query: $query, shape: Shape::of(['receipts' => 'array']));
        $body = Client::json($response);
        $items = array_values($body['receipts']);
        $cursor = $body['next_cursor'] ?? null;
        return new ReceiptPage($items, is_string($cursor) && $cursor !== '' ? $cursor : null);
    }

    /**
     * Every matching receipt, newest first, following nextCursor page by page.
     *
     * @param array{source?: string, status?: string, eventId?: string, limit?: int} $filter limit: the page size
     * @return \Generator<int, array<string, mixed>>
     */
    public function iterate(array $filter = []): \Generator
    {
        $cursor = null;
        do {
            $page = $this->list(['cursor' => $cursor] + $filter);
            yield from $page->items;
            $cursor = $page->nextCursor;
        } while ($cursor !== null && $page->items !== []);
    }

    /**
     * The receipt (status, attempts, result webhook state, the event), or null.
     *
     * @return array<string, mixed>|null
     */
    public function get(string $id): ?array
    {
        $response = $this->client->call('GET', '/v1/receipts/' . Client::segment($id), absentOk: true, shape: Shape::of(['id' => 'string', 'status' => 'string']));
        return $response->status === 404 ? null : Client::json($response);
    }

    /**
     * Delivers a dead, discarded or completed receipt again from attempt 1 (same webhook-id).
     *
     * @return array<string, mixed> ['receipt_id', 'status' => 'accepted', 'replayed' => true]
     */
    public function replay(string $id): array
    {
        return Client::json($this->client->call('POST', '/v1/receipts/' . Client::segment($id) . '/replay', shape: self::ack()));
    }

    /**
     * Marks a dead receipt as handled by hand: it leaves the dead letters and can still be replayed.
     *
     * @return array<string, mixed>
     */
    public function discard(string $id): array
    {
        return Client::json($this->client->call('POST', '/v1/receipts/' . Client::segment($id) . '/discard', shape: self::ack()));
    }

    /**
     * Replays every matching receipt (status defaults to dead); answers how many were queued.
     *
     * @param array{source?: string, status?: string, eventId?: string, createdBefore?: string, createdAfter?: string} $filter
     */
    public function replayMatching(array $filter = []): int
    {
        return $this->matching($filter, false);
    }

    /**
     * How many receipts replayMatching() with this filter would replay; changes nothing.
     *
     * @param array{source?: string, status?: string, eventId?: string, createdBefore?: string, createdAfter?: string} $filter
     */
    public function countMatching(array $filter = []): int
    {
        return $this->matching($filter, true);
    }

    private function matching(array $filter, bool $dryRun): int
    {
        $body = ['dry_run' => $dryRun] + self::pick($filter, self::MATCH_FILTER);
        $field = $dryRun ? 'matching' : 'queued';
        $response = $this->client->call('POST', '/v1/receipts/replay', Client::encode($body), shape: Shape::of([$field => 'integer']));
        return (int) Client::json($response)[$field];
    }

    /** What replay() and discard() answer. */
    private static function ack(): Shape
    {
        return Shape::of(['receipt_id' => 'string', 'status' => 'string']);
    }

    /**
     * The filter's set values under the API's names; an unknown key is refused (a typo would
     * otherwise widen the filter silently).
     *
     * @param array<string, mixed> $filter
     * @param array<string, string> $names
     * @return array<string, mixed>
     */
    private static function pick(array $filter, array $names): array
    {
        $out = [];
        foreach ($filter as $key => $value) {
            $name = $names[$key] ?? (in_array($key, $names, true) ? $key : null);
            if ($name === null) {
                throw new \InvalidArgumentException("unknown filter '$key': use " . implode(', ', array_keys($names)));
            }
            if ($value !== null) {
                $out[$name] = $value;
            }
        }
        return $out;
    }
}
