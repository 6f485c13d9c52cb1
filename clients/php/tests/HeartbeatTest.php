<?php

declare(strict_types=1);

namespace Idem\Tests;

use Idem\Client;
use Idem\Http\Response;
use Idem\Http\Transport;
use Idem\Http\TransportException;
use Idem\Lease;
use Idem\LeaseLostException;
use Idem\Tests\Support\FakeServer;
use Idem\Tests\Support\FakeTransport;
use Idem\Tests\Support\IdemTestCase;

/**
 * Lease::heartbeat() follows the gateway's rule: the lease counts from before the begin was sent;
 * it is extended every third of it; a failed extension is tried again every 250 ms, so a store
 * outage of a few seconds at the beat costs nothing. With a fake clock and transport, and against
 * the real idem behind a proxy (tests/fake/proxy.php) that fails its extends.
 */
final class HeartbeatTest extends IdemTestCase
{
    private float $now = 1000.0;
    /** @var list<float> */
    private array $slept = [];

    /** A client on a fake clock that only moves when the test (or a sleep, or $beginTakes) moves it. */
    private function fakeClient(Transport $transport): Client
    {
        return new Client(
            'http://idem.test:7070',
            transport: $transport,
            sleep: function (float $s): void {
                $this->slept[] = $s;
                $this->now += $s;
            },
            clock: fn (): float => $this->now,
            rand: static fn (): float => 0.5,
        );
    }

    private static function started(): Response
    {
        return FakeTransport::json(201, ['status' => 'started', 'id' => 'op1', 'token' => 'tok', 'lease_expires_at' => '2026-01-01T00:00:00.000000Z', 'fence' => 1]);
    }

    private static function extended(): Response
    {
        return FakeTransport::json(200, ['lease_expires_at' => '2026-01-01T00:00:00.000000Z']);
    }

    private static function completed(string $result): Response
    {
        return FakeTransport::json(200, ['status' => 'completed', 'id' => 'op1', 'result' => $result, 'completed_at' => 't', 'expires_at' => 't']);
    }

    private static function unavailable(): Response
    {
        return FakeTransport::problem(503, 'store-unavailable', 'the store is away', ['Retry-After' => '1']);
    }

    /** @return list<string> the calls sent; an extend with its timeout (at most a third of the lease) */
    private static function sent(FakeTransport $t): array
    {
        return array_map(static function (array $s): string {
            $what = substr($s['url'], strrpos($s['url'], '/') + 1);
            return $what === 'extend' ? "extend@{$s['timeout']}" : $what;
        }, $t->sent);
    }

    public function testAHeartbeatIsDueAThirdOfTheLeaseAfterTheBeginWasSent(): void
    {
        // The begin takes 1.5 s to answer: a 6 s lease's first beat is due 2 s after it was sent,
        // 0.5 s after its answer.
        $inner = new FakeTransport(self::started(), self::extended(), self::completed('ok'));
        $slowBegin = new class ($inner, function (): void {
            $this->now += 1.5;
        }) implements Transport {
            public function __construct(private FakeTransport $inner, private \Closure $onBegin)
            {
            }

            public function send(string $method, string $url, #[\SensitiveParameter] array $headers, ?string $body, float $timeout): Response
            {
                if (str_ends_with($url, '/begin')) {
                    ($this->onBegin)();
                }
                return $this->inner->send($method, $url, $headers, $body, $timeout);
            }
        };
        $idem = $this->fakeClient($slowBegin);
        $beats = [];
        $result = $idem->operations->run('ns', function (Lease $lease) use (&$beats): string {
            $beats[] = $lease->heartbeat(); // 1.5 s after the begin was sent: not yet
            $this->now += 0.49;
            $beats[] = $lease->heartbeat(); // 1.99 s: not yet
            $this->now += 0.02;
            $beats[] = $lease->heartbeat(); // 2.01 s: due
            $this->now += 1.9;
            $beats[] = $lease->heartbeat(); // 1.9 s after that extend was sent: not yet
            return 'ok';
        }, key: 'k', leaseSeconds: 6);
        self::assertSame('ok', $result);
        self::assertSame([false, false, true, false], $beats);
        self::assertSame(['begin', 'extend@2', 'complete'], self::sent($inner));
    }

    public function testAFailedHeartbeatIsTriedAgainEvery250msOneAttemptEach(): void
    {
        // Three extends answered 503 with Retry-After: 1: each is one attempt (no transport retry,
        // no Retry-After wait), tried again 250 ms later, within heartbeat().
        $t = new FakeTransport(self::started(), self::unavailable(), self::unavailable(), new TransportException('connection reset'), self::extended(), self::completed('kept'));
        $idem = $this->fakeClient($t);
        $result = $idem->operations->run('ns', function (Lease $lease): string {
            $this->now += 2.0;
            self::assertTrue($lease->heartbeat());
            self::assertEqualsWithDelta(6.0, $lease->remaining(), 1e-9, 'the lease counts from before the extend that got through');
            return 'kept';
        }, key: 'k', leaseSeconds: 6);
        self::assertSame('kept', $result);
        self::assertSame([0.25, 0.25, 0.25], $this->slept);
        self::assertSame(['begin', 'extend@2', 'extend@2', 'extend@2', 'extend@2', 'complete'], self::sent($t));
    }

    public function testAHeartbeatStopsTryingAtTheLeasesEndAndTheNextOneTriesAgain(): void
    {
        // A 3 s lease: the first beat is due at 1 s; it fails every 250 ms until the lease, as
        // counted here, ends (8 tries), and answers false. A lease that ran out is still this
        // caller's until another takes the key: the next heartbeat() tries again, and gets through.
        $t = new FakeTransport(self::started(), ...array_merge(array_fill(0, 8, self::unavailable()), [self::unavailable(), self::extended(), self::completed('late')]));
        $idem = $this->fakeClient($t);
        $result = $idem->operations->run('ns', function (Lease $lease): string {
            $this->now += 1.0;
            self::assertFalse($lease->heartbeat());
            self::assertEqualsWithDelta(2.75, $this->now - 1000.0, 1e-9);
            self::assertFalse($lease->heartbeat(), 'tried again only 250 ms after the last try');
            $this->now += 0.25;
            self::assertFalse($lease->heartbeat(), 'one try a call once the lease has ended');
            $this->now += 0.1;
            self::assertFalse($lease->heartbeat(), 'not within 250 ms of the last try');
            $this->now += 0.2;
            self::assertTrue($lease->heartbeat());
            return 'late';
        }, key: 'k', leaseSeconds: 3);
        self::assertSame('late', $result);
        self::assertCount(12, $t->sent);
        self::assertSame(array_fill(0, 7, 0.25), $this->slept);
    }

    public function testLeaseLostThrowsAndNothingIsReleased(): void
    {
        $t = new FakeTransport(self::started(), FakeTransport::problem(409, 'lease-lost'));
        $idem = $this->fakeClient($t);
        try {
            $idem->operations->run('ns', function (Lease $lease): string {
                $this->now += 2.5;
                $lease->heartbeat();
                return 'never';
            }, key: 'k', leaseSeconds: 6);
            self::fail('a lost lease was not thrown');
        } catch (LeaseLostException $e) {
            self::assertSame(409, $e->status);
        }
        self::assertSame(['begin', 'extend@2'], self::sent($t));
        self::assertSame([], $this->slept);
    }

    /**
     * A heartbeat across a 3 s store outage at the beat keeps its lease: a 6 s lease, 9 s of work
     * that beats every 50 ms; from just before the first beat is due (2 s after the begin was sent)
     * and for 3 s, every extend is answered 503 with Retry-After: 1. heartbeat() tries again every
     * 250 ms and gets through as soon as the outage ends, 1 s before the lease would have run out;
     * the work completes, once.
     */
    public function testAHeartbeatAcrossA3sStoreOutageAtTheBeatKeepsItsLease(): void
    {
        $proxy = new FakeServer(self::server()->url, router: 'proxy.php');
        try {
            $proxy->plan(['outage' => [1.8, 4.8]]);
            $ns = self::ns();
            $runs = 0;
            $idem = new Client($proxy->url, retries: 2);
            $result = $idem->operations->run($ns, static function (Lease $lease) use (&$runs): string {
                $runs++;
                $end = microtime(true) + 9.0;
                while (microtime(true) < $end) {
                    usleep(50_000);
                    $lease->heartbeat();
                }
                return 'done';
            }, key: 'k', leaseSeconds: 6);
            self::assertSame('done', $result);
            self::assertSame(1, $runs);
            $record = self::client()->operations->get($ns, key: 'k');
            self::assertSame(['completed', 'done'], [$record['status'] ?? null, $record['result'] ?? null]);

            $beats = $proxy->proxied('/extend');
            $shown = json_encode($beats);
            $refused = array_values(array_filter($beats, static fn (array $b): bool => $b['status'] === 503));
            self::assertGreaterThanOrEqual(8, count($refused), "tried again every 250 ms: $shown");
            self::assertLessThan(2.5, $refused[0]['at'], "the first beat is due a third of the lease after the begin was sent: $shown");
            for ($i = 1; $i < count($refused); $i++) {
                self::assertLessThan(0.7, $refused[$i]['at'] - $refused[$i - 1]['at'], "no whole interval (nor Retry-After) between tries: $shown");
            }
            $through = array_values(array_filter($beats, static fn (array $b): bool => $b['status'] === 200 && $b['at'] >= 4.8));
            self::assertNotEmpty($through, $shown);
            self::assertLessThan(5.5, $through[0]['at'], "the first beat after the outage got through at once: $shown");
            self::assertGreaterThanOrEqual(2, count($through), "the beats went on: $shown");
        } finally {
            $proxy->stop();
        }
    }

    /** A 3 s lease whose begin's answer is held back 750 ms: the first beat is due 1 s after the begin was sent. */
    public function testTheLeaseCountsFromBeforeTheBeginWasSent(): void
    {
        $proxy = new FakeServer(self::server()->url, router: 'proxy.php');
        try {
            $proxy->plan(['beginDelay' => 0.75]);
            $idem = new Client($proxy->url);
            $result = $idem->operations->run(self::ns(), static function (Lease $lease): string {
                $end = microtime(true) + 1.3;
                while (microtime(true) < $end) {
                    usleep(20_000);
                    $lease->heartbeat();
                }
                return 'ok';
            }, key: 'k', leaseSeconds: 3);
            self::assertSame('ok', $result);
            $beats = $proxy->proxied('/extend');
            self::assertNotEmpty($beats, 'a beat was sent');
            self::assertGreaterThanOrEqual(0.8, $beats[0]['at'], json_encode($beats));
            self::assertLessThan(1.45, $beats[0]['at'], 'the first beat a third of the lease after the begin was sent: ' . json_encode($beats));
            self::assertSame(200, $beats[0]['status']);
        } finally {
            $proxy->stop();
        }
    }
}
