<?php

declare(strict_types=1);

namespace Idem\Tests;

use Idem\Client;
use Idem\InProgressException;
use Idem\IdemException;
use Idem\Tests\Support\FakeServer;
use Idem\Tests\Support\IdemTestCase;
use Idem\UnavailableException;

/**
 * Client tokens (docs/reference/api.md, "Client tokens"; docs/faults.md): a claim, a batch or a
 * begin retried with its client_token learns what its lost first answer said, and the client sends
 * one token per call, unchanged on each retry.
 */
final class ClientTokenTest extends IdemTestCase
{
    private static ?FakeServer $proxy = null;

    /** A `php -S` in front of the shared idem, answering as its queue says. */
    private static function proxy(): FakeServer
    {
        return self::$proxy ??= new FakeServer(self::server()->url);
    }

    public static function tearDownAfterClass(): void
    {
        self::$proxy?->stop();
        self::$proxy = null;
    }

    private static function proxied(): Client
    {
        return new Client(self::proxy()->url, timeout: 10, sleep: static function (float $s): void {
        });
    }

    public function testAClaimRetriedWithItsTokenIsToldItWon(): void
    {
        $idem = self::client();
        $ns = self::ns();
        self::assertTrue($idem->claims->claim($ns, key: 'k', clientToken: 'tok-A')->claimed);
        $again = $idem->claims->claim($ns, key: 'k', clientToken: 'tok-A');
        self::assertTrue($again->claimed, 'the same client_token: the caller that stored it');
        self::assertFalse($idem->claims->claim($ns, key: 'k', clientToken: 'tok-B')->claimed);
        self::assertFalse($idem->claims->claim($ns, key: 'k')->claimed, 'a call of its own has a token of its own');
    }

    public function testABatchRetriedWithItsTokenIsAnsweredAsFirstDecided(): void
    {
        $idem = self::client();
        $ns = self::ns();
        $idem->claims->claim($ns, key: 'taken');
        $items = ['new-1', 'taken', 'new-2', 'new-1'];
        $first = $idem->claims->claimBatch($ns, $items, clientToken: 'batch-A');
        $retry = $idem->claims->claimBatch($ns, $items, clientToken: 'batch-A');
        $other = $idem->claims->claimBatch($ns, $items, clientToken: 'batch-B');
        $claimed = static fn (array $results): array => array_map(static fn ($r) => $r->claimed, $results);
        self::assertSame([true, false, true, false], $claimed($first));
        self::assertSame($claimed($first), $claimed($retry));
        self::assertSame([false, false, false, false], $claimed($other));
    }

    public function testABeginRetriedWithItsTokenGetsTheSameLease(): void
    {
        $idem = self::client();
        $ns = self::ns();
        $first = $idem->operations->begin($ns, key: 'k', clientToken: 'op-A');
        self::assertTrue($first->started);
        self::assertIsInt($first->fence);
        $again = $idem->operations->begin($ns, key: 'k', clientToken: 'op-A');
        self::assertTrue($again->started);
        self::assertSame($first->token, $again->token);
        self::assertSame($first->fence, $again->fence);
        try {
            $idem->operations->begin($ns, key: 'k', clientToken: 'op-B');
            self::fail('another token took a held key');
        } catch (InProgressException $e) {
            self::assertSame(409, $e->status);
        }
        // A later holder of the key gets a greater fencing number.
        $idem->operations->release($ns, $first->id, (string) $first->token);
        $next = $idem->operations->begin($ns, key: 'k');
        self::assertGreaterThan($first->fence, $next->fence);
    }

    /**
     * The first answer is lost after idem stored the claim (the proxy forwards the request, then
     * answers 503 outcome-unknown instead): the client's retry carries the same token, and idem
     * tells it that it won.
     */
    public function testAClaimWhoseAnswerWasLostIsToldItWonOnTheRetry(): void
    {
        $proxy = self::proxy();
        $ns = self::ns();
        $proxy->queue(['forward' => true, 'instead' => self::outcomeUnknown()], ['forward' => true]);
        $r = self::proxied()->claims->claim($ns, key: 'lost-answer', data: ['n' => 1]);
        self::assertTrue($r->claimed);
        $sent = $proxy->requests();
        self::assertCount(2, $sent);
        self::assertSame($sent[0]['body'], $sent[1]['body'], 'the retry is the same request');
        self::assertNotEmpty(json_decode($sent[0]['body'], true)['client_token']);
        // Without the token the retry would have been told claimed: false: idem stored it once.
        self::assertFalse(self::client()->claims->claim($ns, key: 'lost-answer')->claimed);
    }

    public function testABeginWhoseAnswerWasLostGetsItsLeaseOnTheRetry(): void
    {
        $proxy = self::proxy();
        $ns = self::ns();
        // The begin (its answer lost), its retry, then the complete.
        $proxy->queue(['forward' => true, 'instead' => self::outcomeUnknown()], ['forward' => true], ['forward' => true]);
        $result = self::proxied()->operations->run($ns, static fn (): array => ['ran' => true], key: 'job');
        self::assertSame(['ran' => true], $result);
        $sent = $proxy->requests();
        self::assertSame('/v1/operations/' . $ns . '/begin', $sent[0]['path']);
        self::assertSame($sent[0]['body'], $sent[1]['body']);
        self::assertSame('completed', self::client()->operations->get($ns, key: 'job')['status']);
    }

    /** A fake answering 503 outcome-unknown, then 201: the two bodies the client sent carry one token. */
    public function testTheRetryOfACannedOutcomeUnknownReusesTheToken(): void
    {
        $proxy = self::proxy();
        $proxy->queue(self::outcomeUnknown(), ['status' => 201, 'body' => ['claimed' => true, 'namespace' => 'ns', 'id' => 'x', 'parts' => ['k'], 'data' => null, 'created_at' => 'now', 'expires_at' => null]]);
        self::assertTrue(self::proxied()->claims->claim('ns', key: 'k')->claimed);
        [$first, $second] = array_map(static fn (array $r): array => json_decode($r['body'], true), $proxy->requests());
        self::assertSame($first['client_token'], $second['client_token']);
        self::assertMatchesRegularExpression('/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/', $first['client_token']);

        // A new call is a new request: a new token.
        $proxy->queue(['forward' => true]);
        self::proxied()->claims->claim(self::ns(), key: 'k');
        self::assertNotSame($first['client_token'], json_decode($proxy->requests()[0]['body'], true)['client_token']);
    }

    public function testOutcomeUnknownAfterEveryRetryIsUnavailable(): void
    {
        $proxy = self::proxy();
        $proxy->queue(self::outcomeUnknown(), self::outcomeUnknown());
        try {
            self::proxied()->withOptions(retries: 1)->claims->claim('ns', key: 'k');
            self::fail('no exception');
        } catch (UnavailableException $e) {
            self::assertSame(IdemException::OUTCOME_UNKNOWN, $e->type);
            self::assertSame(0.0, $e->retryAfter);
        }
    }

    private static function outcomeUnknown(): array
    {
        return ['status' => 503, 'headers' => ['Retry-After' => '0'], 'body' => [
            'type' => 'urn:idem:problem:outcome-unknown',
            'title' => 'Service Unavailable',
            'status' => 503,
            'detail' => "the store's answer was lost after the change was sent",
        ]];
    }
}
