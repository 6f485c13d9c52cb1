<?php

declare(strict_types=1);

namespace Idem\Tests;

use Idem\Client;
use Idem\ConnectionException;
use Idem\Http\StreamTransport;
use Idem\Http\TransportException;
use Idem\IdemException;
use Idem\Tests\Support\FakeServer;
use PHPUnit\Framework\TestCase;

/** The default transport (PHP's streams, no curl) against a real HTTP server: `php -S` answering as told. */
final class StreamTransportTest extends TestCase
{
    private static FakeServer $fake;

    public static function setUpBeforeClass(): void
    {
        self::$fake = new FakeServer();
    }

    public static function tearDownAfterClass(): void
    {
        self::$fake->stop();
    }

    public function testSendsMethodPathHeadersAndBody(): void
    {
        self::$fake->queue(['status' => 201, 'headers' => ['X-Extra' => 'a'], 'body' => ['claimed' => true, 'id' => 'x']]);
        $response = (new StreamTransport())->send('POST', self::$fake->url . '/v1/claims/ns?a=1', ['Authorization' => 'Bearer t', 'Content-Type' => 'application/json'], '{"key":"k"}', 5.0);
        self::assertSame(201, $response->status);
        self::assertSame('Created', $response->reason);
        self::assertSame('a', $response->header('x-extra'));
        self::assertSame(['claimed' => true, 'id' => 'x'], json_decode($response->body, true));
        $sent = self::$fake->requests()[0];
        self::assertSame(['POST', '/v1/claims/ns?a=1', '{"key":"k"}'], [$sent['method'], $sent['path'], $sent['body']]);
        self::assertSame('Bearer t', $sent['headers']['authorization']);
        self::assertSame('application/json', $sent['headers']['content-type']);
    }

    public function testErrorAnswersAndEmptyBodiesAreAnswers(): void
    {
        self::$fake->queue(['status' => 404, 'body' => ['type' => 'urn:idem:problem:not-found', 'title' => 'Not Found', 'status' => 404]], ['status' => 204]);
        $t = new StreamTransport();
        self::assertSame(404, $t->send('GET', self::$fake->url . '/x', [], null, 5.0)->status);
        $empty = $t->send('DELETE', self::$fake->url . '/x', [], null, 5.0);
        self::assertSame([204, ''], [$empty->status, $empty->body]);
    }

    public function testARedirectIsReturnedNotFollowed(): void
    {
        self::$fake->queue(['status' => 302, 'headers' => ['Location' => '/elsewhere']]);
        $response = (new StreamTransport())->send('GET', self::$fake->url . '/x', [], null, 5.0);
        self::assertSame(302, $response->status);
        self::assertCount(1, self::$fake->requests());
    }

    public function testAnAnswerSlowerThanTheTimeoutIsATimeout(): void
    {
        self::$fake->queue(['status' => 200, 'sleep' => 2.0, 'body' => ['late' => true]]);
        $t0 = microtime(true);
        try {
            (new StreamTransport())->send('GET', self::$fake->url . '/slow', [], null, 0.5);
            self::fail('no timeout');
        } catch (TransportException $e) {
            self::assertTrue($e->timedOut, $e->getMessage());
        }
        self::assertLessThan(1.8, microtime(true) - $t0);
    }

    public function testTheClientRetriesATimeoutThenSaysSo(): void
    {
        self::$fake->queue(['status' => 200, 'sleep' => 1.0, 'body' => []], ['status' => 200, 'sleep' => 1.0, 'body' => []]);
        $idem = new Client(self::$fake->url, timeout: 0.3, retries: 1, sleep: static function (float $s): void {
        });
        try {
            $idem->claims->get('ns', key: 'k');
            self::fail('no exception');
        } catch (ConnectionException $e) {
            self::assertSame(IdemException::TIMEOUT, $e->type);
            self::assertStringContainsString('2 attempts', $e->detail);
        }
    }

    public function testARefusedConnectionIsATransportError(): void
    {
        $port = \Idem\Tests\Support\IdemServer::freePort();
        try {
            (new StreamTransport())->send('GET', "http://127.0.0.1:$port/", [], null, 2.0);
            self::fail('no exception');
        } catch (TransportException $e) {
            self::assertFalse($e->timedOut);
            self::assertStringContainsStringIgnoringCase('refused', $e->getMessage());
        }
    }
}
