<?php

declare(strict_types=1);

namespace Idem;

/**
 * $idem->claims: the first-writer-wins dedup store (docs/reference/api.md#claims).
 *
 * A key is key: 'a string' or parts: ['scenario-1', 'user-3'] (its one-part form is the same
 * key); get() and delete() take id: too. Records keep the API's field names.
 */
final class Claims
{
    /** @internal */
    public function __construct(private readonly Client $client)
    {
    }

    /**
     * Claims a key: ->claimed is true for exactly one caller; ->record is the record.
     *
     * @param list<string>|null $parts
     * @param mixed $data any JSON value (at most 64 KiB), stored with the claim; null: none
     * @param int|null $ttlSeconds how long the claim lives; default the namespace's default_ttl, else never
     * @param string|null $clientToken sent on every attempt of this call (default: a random UUID),
     *                                 so that a retry of a claim that was stored is told claimed: true
     */
    public function claim(
        string $ns,
        ?string $key = null,
        ?array $parts = null,
        mixed $data = null,
        ?int $ttlSeconds = null,
        ?string $clientToken = null,
    ): ClaimResult {
        $body = Key::body($key, $parts);
        if ($data !== null) {
            $body['data'] = $data;
        }
        if ($ttlSeconds !== null) {
            $body['ttl_seconds'] = $ttlSeconds;
        }
        $body['client_token'] = $clientToken ?? Key::clientToken();
        $response = $this->client->call('POST', '/v1/claims/' . Client::segment($ns), Client::encode($body), shape: Shape::claim());
        return ClaimResult::fromApi(Client::json($response));
    }

    /**
     * Claims 1 to 10,000 keys in one call; the results in request order (the first of two equal
     * keys wins). An item is a key (string), parts (a list of strings) or an array as the API
     * takes it: ['key' => …] or ['parts' => […]], with 'data' and 'ttl_seconds'.
     *
     * @param list<string|list<string>|array<string, mixed>> $items
     * @return list<ClaimResult>
     */
    public function claimBatch(string $ns, array $items, ?string $clientToken = null): array
    {
        $body = [
            'items' => array_map([Key::class, 'item'], array_values($items)),
            'client_token' => $clientToken ?? Key::clientToken(),
        ];
        $response = $this->client->call('POST', '/v1/claims/' . Client::segment($ns) . '/batch', Client::encode($body), shape: Shape::listOf('results', ['claimed' => 'boolean', 'id' => 'string']));
        return array_map([ClaimResult::class, 'fromApi'], self::results($response));
    }

    /**
     * Which of these keys exist, in request order; ->record is set when ->exists.
     *
     * @param list<string|list<string>|array<string, mixed>> $items as for claimBatch()
     * @return list<LookupResult>
     */
    public function lookup(string $ns, array $items): array
    {
        $body = ['items' => array_map([Key::class, 'item'], array_values($items))];
        $response = $this->client->call('POST', '/v1/claims/' . Client::segment($ns) . '/lookup', Client::encode($body), shape: Shape::listOf('results', ['id' => 'string', 'exists' => 'boolean']));
        return array_map([LookupResult::class, 'fromApi'], self::results($response));
    }

    /**
     * Is there a live claim whose parts begin with $prefix (['scenario-1', 'user-3'], or one
     * string)? With key: or parts: instead, does this exact key exist?
     *
     * @param string|list<string>|null $prefix
     * @param list<string>|null $parts
     */
    public function exists(string $ns, string|array|null $prefix = null, ?string $key = null, ?array $parts = null): bool
    {
        if ($prefix !== null) {
            if ($key !== null || $parts !== null) {
                throw new \InvalidArgumentException('give prefix, or key: / parts:, not both');
            }
            $body = ['prefix' => is_string($prefix) ? [$prefix] : array_values($prefix)];
            $response = $this->client->call('POST', '/v1/claims/' . Client::segment($ns) . '/prefix', Client::encode($body), shape: Shape::of(['exists' => 'boolean']));
            return Client::json($response)['exists'] === true;
        }
        $item = Key::body($key, $parts);
        return $this->lookup($ns, [$item])[0]->exists;
    }

    /**
     * The record, or null when absent (or expired).
     *
     * @param list<string>|null $parts
     * @return array<string, mixed>|null
     */
    public function get(string $ns, ?string $key = null, ?array $parts = null, ?string $id = null): ?array
    {
        $path = '/v1/claims/' . Client::segment($ns) . '/' . Client::segment(Key::resolve($id, $key, $parts));
        $response = $this->client->call('GET', $path, absentOk: true, shape: Shape::of(['id' => 'string']));
        return $response->status === 404 ? null : Client::json($response);
    }

    /**
     * Deletes a claim: true if it existed, false if it was absent.
     *
     * @param list<string>|null $parts
     */
    public function delete(string $ns, ?string $key = null, ?array $parts = null, ?string $id = null): bool
    {
        $path = '/v1/claims/' . Client::segment($ns) . '/' . Client::segment(Key::resolve($id, $key, $parts));
        return $this->client->call('DELETE', $path, absentOk: true)->status !== 404;
    }

    /**
     * One page of the live claims whose parts begin with $prefix (1 to 16 parts; a string is one
     * part), in the order of their parts: ->items (records) and ->next, which is the after: of the
     * next page (null on the last).
     *
     * @param string|list<string> $prefix
     * @param int|null $limit 1 to 1000 (the server's default: 100)
     */
    public function list(string $ns, string|array $prefix, ?int $limit = null, ?string $after = null): ClaimPage
    {
        $query = ['prefix' => self::prefix($prefix)];
        if ($limit !== null) {
            $query['limit'] = (string) $limit;
        }
        if ($after !== null) {
            $query['after'] = $after;
        }
        $response = $this->client->call('GET', '/v1/claims/' . Client::segment($ns), query: $query, shape: Shape::of(['items' => 'array']));
        $body = Client::json($response);
        $items = $body['items'];
        $next = $body['next'] ?? null;
        return new ClaimPage($items, is_string($next) && $next !== '' ? $next : null);
    }

    /**
     * Every live claim whose parts begin with $prefix, in the order of their parts, page after page.
     *
     * @param string|list<string> $prefix
     * @param int|null $pageSize claims fetched a call, 1 to 1000 (the server's default: 100)
     * @return \Generator<int, array<string, mixed>>
     */
    public function iterate(string $ns, string|array $prefix, ?int $pageSize = null): \Generator
    {
        $after = null;
        do {
            $page = $this->list($ns, $prefix, $pageSize, $after);
            yield from $page->items;
            $after = $page->next;
        } while ($after !== null && $page->items !== []);
    }

    /**
     * Deletes every live claim whose parts begin with $prefix (at least one part); answers how
     * many were deleted. The server deletes up to 100,000 a call and says when more remain: this
     * calls again until none do.
     *
     * @param string|list<string> $prefix
     */
    public function deletePrefix(string $ns, string|array $prefix): int
    {
        $query = ['prefix' => self::prefix($prefix)];
        $total = 0;
        do {
            $response = $this->client->call('DELETE', '/v1/claims/' . Client::segment($ns), query: $query, shape: Shape::of(['deleted' => 'integer']));
            $body = Client::json($response);
            $deleted = (int) $body['deleted'];
            $total += $deleted;
            // A call that deleted nothing cannot have more to delete: never loop on a confused answer.
        } while (($body['more'] ?? false) === true && $deleted > 0);
        return $total;
    }

    /**
     * @param string|list<string> $prefix
     * @return list<string>
     */
    private static function prefix(string|array $prefix): array
    {
        $parts = is_string($prefix) ? [$prefix] : array_values($prefix);
        if ($parts === []) {
            throw new \InvalidArgumentException("a prefix is at least one part, e.g. ['scenario-1']");
        }
        return $parts;
    }

    /** @return list<array<string, mixed>> the results of an answer whose shape was checked */
    private static function results(Http\Response $response): array
    {
        return array_values(Client::json($response)['results']);
    }
}
