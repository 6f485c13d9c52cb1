<?php

declare(strict_types=1);

namespace Idem\Tests;

use Idem\Client;
use Idem\IdemException;
use Idem\Tests\Support\FakeServer;
use Idem\Tests\Support\IdemTestCase;

use function Idem\claimId;

/**
 * Listing and deleting a prefix against a real `idem serve`; and, on a tiny fake server (`php -S`),
 * a server that is not idem (an HTML 404) and a deletion that needs more than one call (more: true).
 */
final class ClaimsPrefixTest extends IdemTestCase
{
    /** @return list<list<string>> scenario-1: 5 users x 5 nodes, out of order */
    private static function mine(): array
    {
        $mine = [];
        foreach ([4, 1, 5, 3, 2] as $u) {
            foreach ([3, 5, 1, 4, 2] as $n) {
                $mine[] = ['scenario-1', "user-$u", "node-$n"];
            }
        }
        return $mine;
    }

    private const NEIGHBOURS = [['scenario-10', 'user-1', 'node-1'], ['scenario-2', 'user-1', 'node-1'], ['scenario-0', 'user-9']];

    /** The 25 in the server's order: each part followed by NUL, compared byte by byte. */
    private static function sorted(): array
    {
        $mine = self::mine();
        usort($mine, static fn (array $a, array $b): int => strcmp(implode("\0", $a) . "\0", implode("\0", $b) . "\0"));
        return $mine;
    }

    /** A namespace with the 25 and the neighbours, and $ns-other with the 25 alone. */
    private static function fill(Client $idem): string
    {
        $ns = self::ns();
        $items = [];
        foreach ([...self::mine(), ...self::NEIGHBOURS] as $i => $parts) {
            $items[] = ['parts' => $parts, 'data' => ['i' => $i]];
        }
        $idem->claims->claimBatch($ns, $items);
        $idem->claims->claimBatch("$ns-other", self::mine());
        return $ns;
    }

    public function testListPagesInPartsOrderUntilNextIsNull(): void
    {
        $idem = self::client();
        $ns = self::fill($idem);
        $pages = [];
        $after = null;
        do {
            $page = $idem->claims->list($ns, ['scenario-1'], limit: 10, after: $after);
            $pages[] = $page;
            $after = $page->next;
        } while ($after !== null);
        self::assertSame([10, 10, 5], array_map(static fn ($p): int => count($p->items), $pages));
        $listed = array_merge(...array_map(static fn ($p): array => $p->items, $pages));
        self::assertSame(self::sorted(), array_column($listed, 'parts'));
        foreach ($listed as $record) {
            self::assertSame([$ns, claimId($record['parts'])], [$record['namespace'], $record['id']]);
            self::assertIsInt($record['data']['i']);
            self::assertMatchesRegularExpression('/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/', $record['created_at']);
        }

        $user3 = $idem->claims->list($ns, ['scenario-1', 'user-3']);
        self::assertSame(['node-1', 'node-2', 'node-3', 'node-4', 'node-5'], array_map(static fn (array $r): string => $r['parts'][2], $user3->items));
        self::assertNull($user3->next);
        self::assertSame([], $idem->claims->list($ns, ['scenario-1', 'user-30'])->items);
        self::assertSame([['scenario-0', 'user-9']], array_column($idem->claims->list($ns, 'scenario-0')->items, 'parts'), 'a string is one part');
        try {
            $idem->claims->list($ns, ['scenario-1'], limit: 1001);
            self::fail('limit 1001 was accepted');
        } catch (IdemException $e) {
            self::assertSame([400, 'limit', false], [$e->status, $e->field, $e->notIdem]);
        }
    }

    public function testIterateYieldsEveryClaimUnderThePrefixAcrossPages(): void
    {
        $idem = self::client();
        $ns = self::fill($idem);
        self::assertSame(self::sorted(), array_column(iterator_to_array($idem->claims->iterate($ns, ['scenario-1'], pageSize: 7), false), 'parts'));
    }

    public function testDeletePrefixOfTwoPartsThenOneLeavesOtherPrefixesAndNamespaces(): void
    {
        $idem = self::client();
        $ns = self::fill($idem);
        self::assertSame(5, $idem->claims->deletePrefix($ns, ['scenario-1', 'user-3']));
        self::assertFalse($idem->claims->exists($ns, ['scenario-1', 'user-3']));
        self::assertTrue($idem->claims->exists($ns, ['scenario-1', 'user-2']));
        self::assertSame(20, $idem->claims->deletePrefix($ns, ['scenario-1']));
        self::assertSame(0, $idem->claims->deletePrefix($ns, 'scenario-1'));
        self::assertSame([], $idem->claims->list($ns, ['scenario-1'])->items);
        foreach (self::NEIGHBOURS as $parts) {
            self::assertTrue($idem->claims->exists($ns, parts: $parts), implode('/', $parts));
        }
        self::assertCount(25, iterator_to_array($idem->claims->iterate("$ns-other", ['scenario-1']), false), 'another namespace keeps its claims');
        self::assertTrue($idem->claims->claim($ns, parts: self::mine()[0])->claimed, 'claimable again once deleted');
    }

    public function testAnHtml404SaysTheUrlDoesNotLookLikeIdem(): void
    {
        $fake = new FakeServer();
        try {
            $idem = new Client($fake->url, retries: 0);
            $calls = [
                static fn () => $idem->claims->claim('survey', key: 'k'),
                static fn () => $idem->claims->get('survey', key: 'k'),
                static fn () => $idem->claims->list('survey', ['scenario-1']),
                static fn () => $idem->claims->deletePrefix('survey', ['scenario-1']),
            ];
            foreach ($calls as $call) {
                $fake->queue(['status' => 404, 'headers' => ['Content-Type' => 'text/html; charset=UTF-8'], 'body' => '<html><body><h1>Not Found</h1></body></html>']);
                try {
                    $call();
                    self::fail('an HTML 404 was not an error');
                } catch (IdemException $e) {
                    self::assertSame(IdemException::class, get_class($e));
                    self::assertSame([404, true], [$e->status, $e->notIdem]);
                    self::assertMatchesRegularExpression(
                        '#^404 Not Found: ' . preg_quote($fake->url, '#') . ' answered 404 to \w+ /v1/claims/survey\S* without an idem problem document: it does not look like idem \(check the client\'s url: or IDEM_URL\)$#',
                        $e->getMessage(),
                    );
                }
            }
        } finally {
            $fake->stop();
        }
    }

    public function testDeletePrefixCallsAgainWhileMoreIsTrue(): void
    {
        $fake = new FakeServer();
        try {
            $fake->queue(
                ['status' => 200, 'body' => ['deleted' => 100000, 'more' => true]],
                ['status' => 200, 'body' => ['deleted' => 100000, 'more' => true]],
                ['status' => 200, 'body' => ['deleted' => 42, 'more' => false]],
            );
            self::assertSame(200042, (new Client($fake->url, retries: 0))->claims->deletePrefix('survey', ['scenario 1', 'user/3']));
            $sent = array_map(static fn (array $r): string => "{$r['method']} {$r['path']}", $fake->requests());
            self::assertSame(array_fill(0, 3, 'DELETE /v1/claims/survey?prefix=scenario%201&prefix=user%2F3'), $sent);
        } finally {
            $fake->stop();
        }
    }
}
