<?php

declare(strict_types=1);

namespace Idem\Tests;

use Idem\Client;
use Idem\ConnectionException;
use Idem\ForbiddenException;
use Idem\IdemException;
use Idem\Tests\Support\IdemServer;
use Idem\Tests\Support\IdemTestCase;
use Idem\UnauthorizedException;

use function Idem\claimId;

/** Claims against a real `idem serve`. */
final class ClaimsTest extends IdemTestCase
{
    public function testAClaimIsNewThenExisting(): void
    {
        $idem = self::client();
        $ns = self::ns();
        $first = $idem->claims->claim($ns, parts: ['scenario-1', 'user-3', 'node-2'], data: ['answer' => 'A'], ttlSeconds: 3600);
        self::assertTrue($first->claimed);
        $record = $first->record;
        self::assertSame($ns, $record['namespace']);
        self::assertSame(['scenario-1', 'user-3', 'node-2'], $record['parts']);
        self::assertSame(['answer' => 'A'], $record['data']);
        self::assertMatchesRegularExpression('/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/', $record['created_at']);
        self::assertNotNull($record['expires_at']);

        $second = $idem->claims->claim($ns, parts: ['scenario-1', 'user-3', 'node-2'], data: ['answer' => 'B']);
        self::assertFalse($second->claimed);
        self::assertSame($record, $second->record, 'the existing record, unchanged');
    }

    public function testClaimIdIsTheServersId(): void
    {
        $idem = self::client();
        $ns = self::ns();
        self::assertSame(claimId('k'), $idem->claims->claim($ns, key: 'k')->id);
        self::assertSame(claimId(['a_b', 'c']), $idem->claims->claim($ns, parts: ['a_b', 'c'])->id);
        self::assertFalse($idem->claims->claim($ns, parts: ['k'])->claimed, 'key: k and parts: [k] are one key');
        $vectors = json_decode((string) file_get_contents(dirname(__DIR__, 2) . '/testdata/claim_ids.json'), true)['vectors'];
        $results = $idem->claims->claimBatch($ns, array_map(static fn (array $v): array => ['parts' => $v['parts']], $vectors));
        self::assertSame(array_column($vectors, 'id'), array_map(static fn ($r) => $r->id, $results));
    }

    public function testABatchAnswersInRequestOrderAndTheFirstOfEqualKeysWins(): void
    {
        $idem = self::client();
        $ns = self::ns();
        $idem->claims->claim($ns, key: 'old');
        $results = $idem->claims->claimBatch($ns, [
            ['key' => 'a', 'data' => 1],
            'old',
            ['parts' => ['b', 'c'], 'ttl_seconds' => 60],
            ['key' => 'a', 'data' => 2],
        ]);
        self::assertSame([true, false, true, false], array_map(static fn ($r) => $r->claimed, $results));
        self::assertSame(['a', 'old', 'b', 'a'], array_map(static fn ($r) => $r->record['parts'][0], $results));
        self::assertSame(1, $results[3]->record['data'], 'the first of two equal keys wins');
        self::assertNotNull($results[2]->record['expires_at']);
    }

    public function testLookupAndExists(): void
    {
        $idem = self::client();
        $ns = self::ns();
        $idem->claims->claim($ns, parts: ['scenario-1', 'user-3', 'node-2']);
        $found = $idem->claims->lookup($ns, [['scenario-1', 'user-3', 'node-2'], 'nope']);
        self::assertTrue($found[0]->exists);
        self::assertSame(claimId(['scenario-1', 'user-3', 'node-2']), $found[0]->id);
        self::assertSame(['scenario-1', 'user-3', 'node-2'], $found[0]->record['parts']);
        self::assertFalse($found[1]->exists);
        self::assertSame(claimId('nope'), $found[1]->id);
        self::assertNull($found[1]->record);

        self::assertTrue($idem->claims->exists($ns, ['scenario-1', 'user-3']));
        self::assertTrue($idem->claims->exists($ns, 'scenario-1'));
        self::assertFalse($idem->claims->exists($ns, ['scenario-1', 'user-4']));
        self::assertTrue($idem->claims->exists($ns, parts: ['scenario-1', 'user-3', 'node-2']));
        self::assertFalse($idem->claims->exists($ns, key: 'scenario-1'));
    }

    public function testGetAndDelete(): void
    {
        $idem = self::client();
        $ns = self::ns();
        self::assertNull($idem->claims->get($ns, key: 'k'));
        self::assertFalse($idem->claims->delete($ns, key: 'k'));
        $id = $idem->claims->claim($ns, key: 'k', data: ['x' => 1])->id;
        self::assertSame(['x' => 1], $idem->claims->get($ns, key: 'k')['data']);
        self::assertSame($id, $idem->claims->get($ns, id: $id)['id']);
        self::assertTrue($idem->claims->delete($ns, id: $id));
        self::assertNull($idem->claims->get($ns, parts: ['k']));
        self::assertTrue($idem->claims->claim($ns, key: 'k')->claimed, 'a deleted key can be claimed again');
    }

    public function testAnExpiredClaimIsAbsent(): void
    {
        $idem = self::client();
        $ns = self::ns();
        $idem->claims->claim($ns, key: 'short', ttlSeconds: 1);
        $deadline = microtime(true) + 5;
        while ($idem->claims->get($ns, key: 'short') !== null && microtime(true) < $deadline) {
            usleep(100_000);
        }
        self::assertNull($idem->claims->get($ns, key: 'short'));
        self::assertTrue($idem->claims->claim($ns, key: 'short')->claimed);
    }

    public function testBadInputIsAProblemNamingTheField(): void
    {
        $idem = self::client();
        try {
            $idem->claims->claimBatch(self::ns(), ['a', ['ok', ''], 'c']);
            self::fail('no exception');
        } catch (IdemException $e) {
            self::assertSame(400, $e->status);
            self::assertSame('urn:idem:problem:invalid-request', $e->type);
            self::assertSame('items[1].parts[1]', $e->field);
            self::assertNotSame('', $e->detail);
        }
        try {
            $idem->claims->claim('Not A Namespace', key: 'k');
            self::fail('no exception');
        } catch (IdemException $e) {
            self::assertSame(400, $e->status);
        }
    }

    public function testAWrongBaseUrlIsAnErrorNotAbsent(): void
    {
        $idem = new Client(self::server()->url . '/api');
        $this->expectException(IdemException::class);
        $idem->claims->get(self::ns(), key: 'k');
    }

    /** Of several processes claiming one key at once, exactly one is told it won, and every one sees its record. */
    public function testConcurrentClaimsOfOneKeyHaveOneWinner(): void
    {
        $ns = self::ns();
        $start = sys_get_temp_dir() . '/idem-php-race-' . bin2hex(random_bytes(4));
        $script = __DIR__ . '/Support/claim-once.php';
        $processes = [];
        for ($i = 0; $i < 8; $i++) {
            $processes[] = proc_open([PHP_BINARY, $script, self::server()->url, $ns, 'the-key', $start], [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
            $outputs[] = $pipes;
        }
        usleep(200_000); // let them all reach the start line; correctness does not depend on it
        touch($start);
        $answers = [];
        foreach ($processes as $i => $process) {
            $out = stream_get_contents($outputs[$i][1]);
            $err = stream_get_contents($outputs[$i][2]);
            self::assertSame(0, proc_close($process), $err);
            $answers[] = json_decode((string) $out, true, 512, JSON_THROW_ON_ERROR);
        }
        unlink($start);
        $winners = array_values(array_filter($answers, static fn (array $a): bool => $a['claimed']));
        self::assertCount(1, $winners);
        foreach ($answers as $answer) {
            self::assertSame($winners[0]['pid'], $answer['data']['pid'], 'every loser sees the winner\'s record');
        }
    }

    public function testTokens(): void
    {
        $ns = self::ns();
        try {
            self::client(config: self::AUTH_CONFIG)->claims->claim($ns, key: 'k');
            self::fail('no exception');
        } catch (UnauthorizedException $e) {
            self::assertSame(401, $e->status);
        }
        try {
            self::client('wrong', self::AUTH_CONFIG)->claims->claim($ns, key: 'k');
            self::fail('no exception');
        } catch (UnauthorizedException) {
        }
        self::assertTrue(self::client('t0k', self::AUTH_CONFIG)->claims->claim($ns, key: 'k')->claimed);

        $viewer = self::client('v13w', self::AUTH_CONFIG);
        self::assertNotNull($viewer->claims->get($ns, key: 'k'));
        self::assertTrue($viewer->claims->lookup($ns, ['k'])[0]->exists);
        try {
            $viewer->claims->claim($ns, key: 'other');
            self::fail('no exception');
        } catch (ForbiddenException $e) {
            self::assertSame(403, $e->status);
            self::assertSame('urn:idem:problem:forbidden', $e->type);
            self::assertStringContainsString('write', $e->detail);
        }
        self::assertNull($viewer->claims->get($ns, key: 'other'), 'a refused write changes nothing');
    }

    public function testAnUnreachableServerThrowsAfterItsRetries(): void
    {
        $slept = [];
        $idem = new Client('http://127.0.0.1:' . IdemServer::freePort(), retries: 2, sleep: static function (float $s) use (&$slept): void {
            $slept[] = $s;
        });
        try {
            $idem->claims->claim(self::ns(), key: 'k');
            self::fail('no exception');
        } catch (ConnectionException $e) {
            self::assertSame(0, $e->status);
            self::assertSame(IdemException::CONNECTION, $e->type);
            self::assertStringContainsString('refused', $e->detail);
            self::assertStringContainsString("cannot reach idem at $idem->url", $e->detail);
            self::assertStringEndsWith('3 attempts); to point the client elsewhere, give it url: or set IDEM_URL', $e->detail);
        }
        self::assertCount(2, $slept);
    }
}
