<?php

declare(strict_types=1);

namespace Idem\Tests;

use Idem\Client;
use Idem\IdemException;
use Idem\Tests\Support\FakeServer;
use PHPUnit\Framework\TestCase;

/**
 * A 2xx answer without the fields a call needs (a server that answers `200 {}` or an HTML page to
 * anything) is the not-idem error naming the URL, never a result: claimed missing is not
 * claimed false (code that skips the work when not claimed would silently lose it). Against a
 * `php -S` fake (tests/fake/router.php).
 */
final class NotIdemAnswersTest extends TestCase
{
    private static ?FakeServer $fake = null;

    public static function setUpBeforeClass(): void
    {
        self::$fake = new FakeServer();
    }

    public static function tearDownAfterClass(): void
    {
        self::$fake?->stop();
        self::$fake = null;
    }

    /** @return array<string, array{array<string, mixed>, bool}> */
    public static function answers(): array
    {
        return [
            '200 {}' => [['status' => 200, 'headers' => ['Content-Type' => 'application/json'], 'body' => '{}'], false],
            '200 text/html' => [['status' => 200, 'headers' => ['Content-Type' => 'text/html; charset=UTF-8'], 'body' => '<html><body>Welcome</body></html>'], true],
            '200 with the wrong types' => [['status' => 200, 'body' => [
                'claimed' => 'yes', 'id' => 7, 'results' => [[]], 'exists' => 'no', 'status' => 'started', 'token' => '',
                'items' => ['a' => 1], 'deleted' => '1', 'lease_expires_at' => null, 'receipts' => null, 'receipt_id' => 1,
                'matching' => '2', 'queued' => 1.5,
            ]], false],
        ];
    }

    /**
     * @dataProvider answers
     * @param array<string, mixed> $answer
     */
    public function testEveryCallRefusesA2xxWithoutItsFields(array $answer, bool $html): void
    {
        $fake = self::$fake;
        self::assertNotNull($fake);
        $idem = new Client($fake->url, retries: 0);
        $calls = [
            'POST /v1/claims/survey' => static fn () => $idem->claims->claim('survey', key: 'k'),
            'POST /v1/claims/survey/batch' => static fn () => $idem->claims->claimBatch('survey', ['k']),
            'POST /v1/claims/survey/lookup' => static fn () => $idem->claims->lookup('survey', ['k']),
            'POST /v1/claims/survey/lookup ' => static fn () => $idem->claims->exists('survey', key: 'k'),
            'POST /v1/claims/survey/prefix' => static fn () => $idem->claims->exists('survey', ['a']),
            'GET /v1/claims/survey/' => static fn () => $idem->claims->get('survey', key: 'k'),
            'GET /v1/claims/survey' => static fn () => $idem->claims->list('survey', ['a']),
            'DELETE /v1/claims/survey' => static fn () => $idem->claims->deletePrefix('survey', ['a']),
            'POST /v1/operations/orders/begin' => static fn () => $idem->operations->begin('orders', key: 'k'),
            'POST /v1/operations/orders/begin ' => static fn () => $idem->operations->run('orders', static fn (): string => 'never', key: 'k'),
            'POST /v1/operations/orders/op1/complete' => static fn () => $idem->operations->complete('orders', 'op1', 't', 1),
            'POST /v1/operations/orders/op1/extend' => static fn () => $idem->operations->extend('orders', 'op1', 't', 60),
            'GET /v1/operations/orders/' => static fn () => $idem->operations->get('orders', key: 'k'),
            'GET /v1/receipts' => static fn () => $idem->receipts->list(),
            'GET /v1/receipts/rcpt_1' => static fn () => $idem->receipts->get('rcpt_1'),
            'POST /v1/receipts/rcpt_1/replay' => static fn () => $idem->receipts->replay('rcpt_1'),
            'POST /v1/receipts/rcpt_1/discard' => static fn () => $idem->receipts->discard('rcpt_1'),
            'POST /v1/receipts/replay' => static fn () => $idem->receipts->countMatching(),
            'POST /v1/receipts/replay ' => static fn () => $idem->receipts->replayMatching(),
        ];
        foreach ($calls as $what => $call) {
            $what = rtrim($what);
            $fake->queue($answer);
            try {
                $got = $call();
                self::fail("$what: a 2xx without its fields was read as a result: " . json_encode($got));
            } catch (IdemException $e) {
                self::assertSame(IdemException::class, get_class($e), $e->getMessage());
                self::assertSame([200, true], [$e->status, $e->notIdem], $e->getMessage());
                self::assertStringStartsWith("200 Invalid response: {$fake->url} answered 200 to $what", $e->getMessage());
                self::assertStringEndsWith("it does not look like idem (check the client's url: or IDEM_URL)", $e->getMessage());
                self::assertSame($html, str_contains($e->getMessage(), 'with a body that is not JSON (text/html; charset=UTF-8)'), $e->getMessage());
            }
        }
    }

    public function testARecordWithoutClaimedIsNotClaimedFalse(): void
    {
        $fake = self::$fake;
        self::assertNotNull($fake);
        $fake->queue(['status' => 200, 'body' => ['namespace' => 'survey', 'id' => 'x', 'parts' => ['a'], 'data' => null, 'created_at' => 't', 'expires_at' => null]]);
        $this->expectException(IdemException::class);
        $this->expectExceptionMessage("answered 200 to POST /v1/claims/survey without the fields of idem's answer (expected { claimed: boolean, id: string })");
        (new Client($fake->url, retries: 0))->claims->claim('survey', parts: ['a']);
    }
}
