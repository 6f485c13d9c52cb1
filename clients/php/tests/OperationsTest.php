<?php

declare(strict_types=1);

namespace Idem\Tests;

use Idem\IdemException;
use Idem\InProgressException;
use Idem\Lease;
use Idem\LeaseLostException;
use Idem\MismatchException;
use Idem\Tests\Support\IdemTestCase;

/** Operations against a real `idem serve`: run(), and the four calls beneath it. */
final class OperationsTest extends IdemTestCase
{
    public function testRunDoesTheWorkOnceAndReturnsTheStoredResultAfterwards(): void
    {
        $idem = self::client();
        $ns = self::ns();
        $calls = 0;
        $createOrder = static function () use (&$calls): array {
            $calls++;
            return ['order_id' => 'o-1', 'total' => 120, 'lines' => [], 'meta' => new \stdClass()];
        };
        $expected = ['order_id' => 'o-1', 'total' => 120, 'lines' => [], 'meta' => []];
        self::assertSame($expected, $idem->operations->run($ns, $createOrder, key: 'k', request: ['sku' => 'a']));
        self::assertSame($expected, $idem->operations->run($ns, $createOrder, key: 'k', request: ['sku' => 'a']));
        self::assertSame($expected, $idem->operations->run('' . $ns, key: 'k', fn: $createOrder), 'no request matches any');
        self::assertSame(1, $calls);

        $op = $idem->operations->get($ns, key: 'k');
        self::assertSame('completed', $op['status']);
        self::assertArrayNotHasKey('token', $op);
        self::assertSame(120, $op['result']['total']);

        try {
            $idem->operations->run($ns, $createOrder, key: 'k', request: ['sku' => 'b']);
            self::fail('another request ran');
        } catch (MismatchException $e) {
            self::assertSame(422, $e->status);
            self::assertSame('urn:idem:problem:fingerprint-mismatch', $e->type);
        }
        self::assertTrue($idem->operations->delete($ns, key: 'k'));
        self::assertFalse($idem->operations->delete($ns, key: 'k'));
        self::assertNull($idem->operations->get($ns, key: 'k'));
        $idem->operations->run($ns, $createOrder, key: 'k');
        self::assertSame(2, $calls);
    }

    public function testScalarsAndNullAreResultsToo(): void
    {
        $idem = self::client();
        $ns = self::ns();
        self::assertSame('ran', $idem->operations->run($ns, static fn () => 'ran', parts: ['a', 'b']));
        self::assertSame('ran', $idem->operations->run($ns, static fn () => 'again', parts: ['a', 'b']));
        self::assertNull($idem->operations->run($ns, static fn () => null, key: 'nothing'));
        self::assertNull($idem->operations->run($ns, static fn () => 'not run', key: 'nothing'));
        self::assertSame(1.5, $idem->operations->run($ns, static fn () => 1.5, key: 'float'));
    }

    public function testAClaimAndAnOperationWithOneKeyDoNotSeeEachOther(): void
    {
        $idem = self::client();
        $ns = self::ns();
        $idem->claims->claim($ns, key: 'shared');
        self::assertSame('ran', $idem->operations->run($ns, static fn () => 'ran', key: 'shared'));
        self::assertTrue($idem->claims->claim($ns, key: 'other')->claimed);
        self::assertNull($idem->operations->get($ns, key: 'other'));
    }

    public function testAThrowingFunctionReleasesTheKeySoTheWorkRunsAgain(): void
    {
        $idem = self::client();
        $ns = self::ns();
        try {
            $idem->operations->run($ns, static function (): never {
                throw new \DomainException('card declined');
            }, key: 'pay');
            self::fail('no exception');
        } catch (\DomainException $e) {
            self::assertSame('card declined', $e->getMessage(), 'the function\'s own exception');
        }
        self::assertNull($idem->operations->get($ns, key: 'pay'), 'released: no record');
        self::assertSame('paid', $idem->operations->run($ns, static fn () => 'paid', key: 'pay'));
    }

    public function testAResultThatIsNotJsonReleasesTheKey(): void
    {
        $idem = self::client();
        $ns = self::ns();
        try {
            $idem->operations->run($ns, static fn () => NAN, key: 'nan');
            self::fail('no exception');
        } catch (\JsonException) {
            $this->addToAssertionCount(1);
        }
        self::assertNull($idem->operations->get($ns, key: 'nan'));
    }

    public function testTheFunctionMayTakeTheLease(): void
    {
        $idem = self::client();
        $ns = self::ns();
        $seen = null;
        $idem->operations->run($ns, static function (Lease $lease) use (&$seen): string {
            $seen = $lease;
            self::assertFalse($lease->heartbeat(), 'no extension before half the lease');
            self::assertGreaterThan(50, $lease->remaining());
            return 'done';
        }, key: 'k', leaseSeconds: 120);
        self::assertInstanceOf(Lease::class, $seen);
        self::assertSame($ns, $seen->namespace);
        self::assertSame(120, $seen->seconds);
        self::assertIsInt($seen->fence);
        self::assertStringNotContainsString('token', print_r($seen, true));
    }

    /** A lease of 2 s, work of 2.4 s: a heartbeat past a third of the lease keeps it, and the result is stored. */
    public function testAHeartbeatKeepsTheLeaseWhileTheWorkRuns(): void
    {
        $idem = self::client();
        $ns = self::ns();
        $result = $idem->operations->run($ns, static function (Lease $lease): array {
            $beats = [];
            foreach ([0.6, 0.6, 0.6, 0.6] as $step) {
                usleep((int) ($step * 1e6));
                $beats[] = $lease->heartbeat();
            }
            return $beats;
        }, key: 'long', leaseSeconds: 2);
        self::assertSame([false, true, false, true], $result);
        self::assertSame('completed', $idem->operations->get($ns, key: 'long')['status']);
    }

    /**
     * Without a heartbeat the lease ends: the key is free, and once another caller has taken it,
     * complete() is refused. (A lease that ran out is still its holder's until another begin takes
     * the key.)
     */
    public function testWorkLongerThanItsLeaseLosesIt(): void
    {
        $idem = self::client();
        $ns = self::ns();
        $other = null;
        try {
            $idem->operations->run($ns, static function () use ($idem, $ns, &$other): string {
                usleep(1_500_000);
                $other = $idem->operations->begin($ns, key: 'slow', leaseSeconds: 30);
                return 'late';
            }, key: 'slow', leaseSeconds: 1);
            self::fail('a result was stored after its lease ended and another caller took the key');
        } catch (LeaseLostException $e) {
            self::assertSame(409, $e->status);
            self::assertSame('urn:idem:problem:lease-lost', $e->type);
        }
        self::assertTrue($other?->started, 'the key was free once the lease ended');
        self::assertSame('in_progress', $idem->operations->get($ns, key: 'slow')['status'] ?? null, 'nothing stored: the other caller holds it');
    }

    /** A heartbeat after the lease ended and another caller took the key tells the work to stop; run() rethrows it. */
    public function testAHeartbeatAfterTheLeaseEndedAndWasTakenThrows(): void
    {
        $idem = self::client();
        $ns = self::ns();
        $this->expectException(LeaseLostException::class);
        $idem->operations->run($ns, static function (Lease $lease) use ($idem, $ns): void {
            usleep(1_200_000);
            self::assertTrue($idem->operations->begin($ns, key: 'k')->started);
            $lease->heartbeat();
        }, key: 'k', leaseSeconds: 1);
    }

    /** Another process holds the key: run() waits for it and returns its result without running. */
    public function testRunWaitsForAHolderThatIsStillRunning(): void
    {
        $idem = self::client();
        $ns = self::ns();
        $holder = proc_open([PHP_BINARY, __DIR__ . '/Support/holder.php', self::server()->url, $ns, 'shared-job', '1.0'], [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        self::assertSame("started\n", fgets($pipes[1]));
        $ran = false;
        $t0 = microtime(true);
        $result = $idem->operations->run($ns, static function () use (&$ran): string {
            $ran = true;
            return 'mine';
        }, key: 'shared-job');
        $waited = microtime(true) - $t0;
        $err = stream_get_contents($pipes[2]);
        self::assertSame(0, proc_close($holder), $err);
        self::assertFalse($ran);
        self::assertSame('holder', $result['by']);
        self::assertLessThan(5.0, $waited, 'woken when the holder completed, not by polling');
    }

    public function testRunGivesUpAfterItsWaitTimeout(): void
    {
        $idem = self::client();
        $ns = self::ns();
        $held = $idem->operations->begin($ns, key: 'k', leaseSeconds: 30);
        try {
            $idem->operations->run($ns, static fn () => 'never', key: 'k', waitTimeout: 1.0);
            self::fail('ran while held');
        } catch (InProgressException $e) {
            self::assertSame(409, $e->status);
            self::assertNotNull($e->retryAfter);
        }
        $idem->operations->release($ns, $held->id, (string) $held->token);
    }

    public function testTheFourCallsByHand(): void
    {
        $idem = self::client();
        $ns = self::ns();
        $begun = $idem->operations->begin($ns, parts: ['order-7', 'charge'], request: ['amount' => 500], leaseSeconds: 60);
        self::assertTrue($begun->started);
        self::assertSame(\Idem\claimId(['order-7', 'charge']), $begun->id);
        self::assertNotNull($begun->leaseExpiresAt);
        self::assertStringNotContainsString((string) $begun->token, print_r($begun, true));
        $op = $idem->operations->get($ns, id: $begun->id);
        self::assertSame('in_progress', $op['status']);
        self::assertArrayNotHasKey('token', $op);
        try {
            $idem->operations->delete($ns, id: $begun->id);
            self::fail('deleted a held key');
        } catch (InProgressException) {
        }

        $extended = $idem->operations->extend($ns, $begun->id, (string) $begun->token, 120);
        self::assertArrayHasKey('lease_expires_at', $extended);
        try {
            $idem->operations->complete($ns, $begun->id, str_repeat('0', 32), 1);
            self::fail('completed with another token');
        } catch (LeaseLostException) {
        }
        $done = $idem->operations->complete($ns, $begun->id, (string) $begun->token, ['charge_id' => 'ch_1']);
        self::assertSame('completed', $done['status']);
        self::assertSame($done, $idem->operations->complete($ns, $begun->id, (string) $begun->token, ['charge_id' => 'ch_1']), 'a second complete returns the stored result');

        $later = $idem->operations->begin($ns, parts: ['order-7', 'charge'], request: ['amount' => 500]);
        self::assertTrue($later->completed);
        self::assertSame(['charge_id' => 'ch_1'], $later->result);
        self::assertNotNull($later->completedAt);
        self::assertNull($later->token);

        $other = $idem->operations->begin($ns, key: 'released');
        $idem->operations->release($ns, $other->id, (string) $other->token);
        self::assertNull($idem->operations->get($ns, key: 'released'));
        try {
            $idem->operations->release($ns, $other->id, (string) $other->token);
            self::fail('released twice');
        } catch (LeaseLostException $e) {
            self::assertInstanceOf(IdemException::class, $e);
        }
    }
}
