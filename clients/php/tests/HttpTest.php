<?php

declare(strict_types=1);

namespace Idem\Tests;

use Idem\Client;
use Idem\ConnectionException;
use Idem\ForbiddenException;
use Idem\Http\Response;
use Idem\Http\TransportException;
use Idem\IdemException;
use Idem\InProgressException;
use Idem\LeaseLostException;
use Idem\MismatchException;
use Idem\RetryPolicy;
use Idem\Tests\Support\FakeTransport;
use Idem\UnauthorizedException;
use Idem\UnavailableException;
use PHPUnit\Framework\TestCase;

/** What the client sends and how it reads answers, retries and errors: no server, a FakeTransport. */
final class HttpTest extends TestCase
{
    /** @var list<float> */
    private array $slept = [];

    private function client(FakeTransport $transport, mixed ...$options): Client
    {
        return new Client(...($options + [
            'url' => 'http://idem.test:7070/',
            'transport' => $transport,
            'sleep' => function (float $s): void {
                $this->slept[] = $s;
            },
            'rand' => static fn (): float => 0.5,
        ]));
    }

    private static function record(string $id = 'abc', bool $claimed = true): Response
    {
        return FakeTransport::json($claimed ? 201 : 200, ['claimed' => $claimed, 'namespace' => 'survey', 'id' => $id, 'parts' => ['k'], 'data' => null, 'created_at' => '2026-01-01T00:00:00.000000Z', 'expires_at' => null]);
    }

    public function testAClaimSendsItsKeyDataTtlTokenAndHeaders(): void
    {
        $t = new FakeTransport(self::record());
        $r = $this->client($t, token: 's3cret')->claims->claim('survey', parts: ['scenario-1', 'user-3'], data: ['answer' => 'A', 'empty' => []], ttlSeconds: 60);
        self::assertTrue($r->claimed);
        self::assertSame('abc', $r->id);
        self::assertSame('abc', $r->record['id']);
        self::assertArrayNotHasKey('claimed', $r->record);
        $sent = $t->sent[0];
        self::assertSame('POST', $sent['method']);
        self::assertSame('http://idem.test:7070/v1/claims/survey', $sent['url']);
        self::assertSame('Bearer s3cret', $sent['headers']['Authorization']);
        self::assertSame('application/json', $sent['headers']['Content-Type']);
        self::assertSame('idem-client-php/' . Client::VERSION, $sent['headers']['User-Agent']);
        self::assertSame(10.0, $sent['timeout']);
        $body = $t->body(0);
        self::assertSame(['scenario-1', 'user-3'], $body['parts']);
        self::assertSame(['answer' => 'A', 'empty' => []], $body['data']);
        self::assertSame(60, $body['ttl_seconds']);
        self::assertMatchesRegularExpression('/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/', $body['client_token']);
        self::assertArrayNotHasKey('key', $body);
    }

    public function testEachCallHasItsOwnClientTokenAndACallerMayGiveOne(): void
    {
        $t = new FakeTransport(self::record(), self::record(claimed: false), self::record(), FakeTransport::json(200, ['results' => []]), FakeTransport::json(201, ['status' => 'started', 'id' => 'i', 'token' => 't', 'fence' => 3]));
        $c = $this->client($t);
        $c->claims->claim('ns', key: 'k');
        $c->claims->claim('ns', key: 'k');
        $c->claims->claim('ns', key: 'k', clientToken: 'mine-1');
        $c->claims->claimBatch('ns', ['a'], clientToken: 'mine-2');
        $begun = $c->operations->begin('ns', key: 'k', clientToken: 'mine-3');
        self::assertNotSame($t->body(0)['client_token'], $t->body(1)['client_token']);
        self::assertSame('mine-1', $t->body(2)['client_token']);
        self::assertSame('mine-2', $t->body(3)['client_token']);
        self::assertSame('mine-3', $t->body(4)['client_token']);
        self::assertSame(3, $begun->fence);
    }

    public function testARetryResendsTheSameBodyAndToken(): void
    {
        $t = new FakeTransport(
            FakeTransport::problem(503, 'outcome-unknown', 'the answer was lost', ['Retry-After' => '0']),
            new TransportException('Connection reset by peer'),
            self::record(),
        );
        self::assertTrue($this->client($t)->claims->claim('ns', key: 'k')->claimed);
        self::assertCount(3, $t->sent);
        self::assertSame($t->sent[0]['body'], $t->sent[1]['body']);
        self::assertSame($t->sent[0]['body'], $t->sent[2]['body']);
    }

    public function testKeyArgumentsAreCheckedLocally(): void
    {
        $c = $this->client(new FakeTransport());
        foreach ([
            static fn () => $c->claims->claim('ns'),
            static fn () => $c->claims->claim('ns', key: 'k', parts: ['k']),
            static fn () => $c->claims->claim('ns', parts: ['a' => 'b']),
            static fn () => $c->claims->get('ns'),
            static fn () => $c->claims->get('ns', key: 'k', id: 'x'),
            static fn () => $c->claims->claim('', key: 'k'),
            static fn () => $c->claims->exists('ns', prefix: ['a'], key: 'k'),
        ] as $i => $call) {
            try {
                $call();
                self::fail("call $i was sent");
            } catch (\InvalidArgumentException) {
                $this->addToAssertionCount(1);
            }
        }
    }

    public function testBatchLookupExistsAndTheItemShorthands(): void
    {
        $t = new FakeTransport(
            FakeTransport::json(200, ['results' => [['claimed' => true, 'id' => '1'], ['claimed' => false, 'id' => '2'], ['claimed' => true, 'id' => '3']]]),
            FakeTransport::json(200, ['results' => [['id' => '1', 'exists' => true, 'record' => ['id' => '1']], ['id' => '2', 'exists' => false]]]),
            FakeTransport::json(200, ['exists' => true]),
            FakeTransport::json(200, ['results' => [['id' => '1', 'exists' => false]]]),
        );
        $c = $this->client($t);
        $results = $c->claims->claimBatch('ns', ['a', ['x', 'y'], ['key' => 'b', 'data' => 1, 'ttl_seconds' => 5]]);
        self::assertSame([true, false, true], array_map(static fn ($r) => $r->claimed, $results));
        self::assertSame([['key' => 'a'], ['parts' => ['x', 'y']], ['key' => 'b', 'data' => 1, 'ttl_seconds' => 5]], $t->body(0)['items']);
        $found = $c->claims->lookup('ns', ['a', 'b']);
        self::assertTrue($found[0]->exists);
        self::assertSame(['id' => '1'], $found[0]->record);
        self::assertFalse($found[1]->exists);
        self::assertNull($found[1]->record);
        self::assertTrue($c->claims->exists('ns', ['scenario-1', 'user-3']));
        self::assertSame('http://idem.test:7070/v1/claims/ns/prefix', $t->sent[2]['url']);
        self::assertSame(['prefix' => ['scenario-1', 'user-3']], $t->body(2));
        self::assertFalse($c->claims->exists('ns', key: 'k'));
        self::assertSame(['items' => [['key' => 'k']]], $t->body(3));
    }

    public function testGetAndDeleteReadIdemsOwn404AsAbsent(): void
    {
        $t = new FakeTransport(
            FakeTransport::problem(404, 'not-found'),
            FakeTransport::json(200, ['id' => 'x']),
            FakeTransport::problem(404, 'not-found'),
            new Response(204),
        );
        $c = $this->client($t);
        self::assertNull($c->claims->get('ns', key: 'k'));
        self::assertSame(['id' => 'x'], $c->claims->get('ns', id: 'x'));
        self::assertFalse($c->claims->delete('ns', parts: ['a', 'b']));
        self::assertTrue($c->claims->delete('ns', key: 'k'));
        self::assertSame('http://idem.test:7070/v1/claims/ns/' . hash('sha256', 'k'), $t->sent[0]['url']);
        self::assertSame('http://idem.test:7070/v1/claims/ns/' . hash('sha256', "a\0b"), $t->sent[2]['url']);
        self::assertSame('DELETE', $t->sent[3]['method']);
        self::assertNull($t->sent[0]['body']);
        self::assertArrayNotHasKey('Content-Type', $t->sent[0]['headers']);
    }

    public function testA404ThatIsNotIdemsNotFoundIsAnError(): void
    {
        foreach ([FakeTransport::problem(404, 'no-such-route'), new Response(404, [], '<html>nginx</html>', 'Not Found')] as $answer) {
            try {
                $this->client(new FakeTransport($answer))->claims->get('ns', key: 'k');
                self::fail('a foreign 404 was read as absent');
            } catch (IdemException $e) {
                self::assertSame(404, $e->status);
            }
        }
    }

    public function testPathSegmentsAreEscaped(): void
    {
        $t = new FakeTransport(FakeTransport::problem(404, 'not-found'));
        $this->client($t)->receipts->get('a/b?c');
        self::assertSame('http://idem.test:7070/v1/receipts/a%2Fb%3Fc', $t->sent[0]['url']);
    }

    /** @return iterable<string, array{Response, class-string}> */
    public static function errors(): iterable
    {
        yield '401' => [FakeTransport::problem(401, 'unauthorized'), UnauthorizedException::class];
        yield '403' => [FakeTransport::problem(403, 'forbidden'), ForbiddenException::class];
        yield '409 in-progress' => [FakeTransport::problem(409, 'in-progress', '', ['Retry-After' => '2']), InProgressException::class];
        yield '409 lease-lost' => [FakeTransport::problem(409, 'lease-lost'), LeaseLostException::class];
        yield '409 conflict' => [FakeTransport::problem(409, 'conflict'), IdemException::class];
        yield '422' => [FakeTransport::problem(422, 'fingerprint-mismatch'), MismatchException::class];
        yield '503' => [FakeTransport::problem(503, 'store-unavailable'), UnavailableException::class];
        yield '500' => [FakeTransport::problem(500, 'internal'), IdemException::class];
    }

    /** @dataProvider errors */
    public function testErrorMapping(Response $answer, string $class): void
    {
        try {
            $this->client(new FakeTransport($answer), retries: 0)->claims->claim('ns', key: 'k');
            self::fail('no exception');
        } catch (IdemException $e) {
            self::assertSame($class, get_class($e));
            self::assertSame($answer->status, $e->status);
            self::assertSame(json_decode($answer->body, true)['type'], $e->type);
        }
    }

    public function testAProblemCarriesTypeTitleDetailFieldAndRetryAfter(): void
    {
        $t = new FakeTransport(FakeTransport::problem(400, 'invalid-request', 'items[1].parts[0] must not be empty', field: 'items[1].parts[0]'));
        try {
            $this->client($t)->claims->claimBatch('ns', ['a', ['']]);
            self::fail('no exception');
        } catch (IdemException $e) {
            self::assertSame([400, 'urn:idem:problem:invalid-request', 'Bad Request', 'items[1].parts[0] must not be empty', 'items[1].parts[0]'], [$e->status, $e->type, $e->title, $e->detail, $e->field]);
            self::assertSame('400 Bad Request: items[1].parts[0] must not be empty', $e->getMessage());
            self::assertCount(1, $t->sent, 'a 4xx is never retried');
        }
        try {
            $this->client(new FakeTransport(FakeTransport::problem(409, 'in-progress', 'held', ['Retry-After' => '7'])))->operations->begin('ns', key: 'k');
        } catch (InProgressException $e) {
            self::assertSame(7.0, $e->retryAfter);
        }
    }

    public function testAnAnswerThatIsNotJsonKeepsItsStatusAndReason(): void
    {
        try {
            $this->client(new FakeTransport(new Response(502, [], '<html>bad gateway</html>', 'Bad Gateway')), retries: 0)->claims->claim('ns', key: 'k');
            self::fail('no exception');
        } catch (IdemException $e) {
            self::assertSame([502, 'about:blank', 'Bad Gateway'], [$e->status, $e->type, $e->title]);
            self::assertTrue($e->notIdem);
            self::assertSame('http://idem.test:7070 answered 502 to POST /v1/claims/ns without an idem problem document: it does not look like idem (check the client\'s url: or IDEM_URL)', $e->detail);
        }
    }

    /** @return iterable<string, array{Response, bool}> */
    public static function foreignAnswers(): iterable
    {
        yield 'idem\'s own problem' => [FakeTransport::problem(404, 'no-such-route'), false];
        yield 'an idem type, but not problem+json' => [new Response(404, ['Content-Type' => 'application/json'], '{"type":"urn:idem:problem:no-such-route","title":"T"}', 'Not Found'), true];
        yield 'problem+json of another kind' => [new Response(404, ['Content-Type' => 'application/problem+json'], '{"type":"https://example.com/probs/gone","title":"Gone","detail":"theirs"}', 'Not Found'), true];
        yield 'an HTML page' => [new Response(404, ['Content-Type' => 'text/html'], '<html>nginx</html>', 'Not Found'), true];
    }

    /** @dataProvider foreignAnswers */
    public function testOnlyAProblemDocumentWithAnIdemTypeIsIdemsOwn(Response $answer, bool $notIdem): void
    {
        try {
            $this->client(new FakeTransport($answer))->claims->get('ns', key: 'k');
            self::fail('no exception');
        } catch (IdemException $e) {
            self::assertSame([404, $notIdem], [$e->status, $e->notIdem]);
            self::assertSame($notIdem, str_contains($e->getMessage(), 'does not look like idem'), $e->getMessage());
            self::assertSame($notIdem && str_contains($answer->body, 'theirs'), str_ends_with($e->detail, '[its detail: theirs]'));
        }
    }

    public function testTheTokenDefaultsToIdemToken(): void
    {
        $before = getenv('IDEM_TOKEN');
        try {
            putenv('IDEM_TOKEN=env-t0ken');
            $answers = array_fill(0, 5, FakeTransport::json(200, ['exists' => true]));
            $t = new FakeTransport(...$answers);
            $this->client($t)->claims->exists('ns', 'a');
            $this->client($t, token: 'given')->claims->exists('ns', 'a');
            $this->client($t, token: '')->claims->exists('ns', 'a');
            $this->client($t, headers: ['authorization' => 'Basic b3du'])->claims->exists('ns', 'a');
            $this->client($t)->withOptions(retries: 0)->claims->exists('ns', 'a');
            $auth = array_map(static fn (array $s): ?string => $s['headers']['Authorization'] ?? $s['headers']['authorization'] ?? null, $t->sent);
            self::assertSame(['Bearer env-t0ken', 'Bearer given', null, 'Basic b3du', 'Bearer env-t0ken'], $auth);
        } finally {
            putenv($before === false ? 'IDEM_TOKEN' : "IDEM_TOKEN=$before");
        }
    }

    public function testListIterateAndDeletePrefixRequestsAndAnswers(): void
    {
        $times = ['2026-11-18T11:06:40.123000Z', '2026-11-18T11:06:40.9Z', '2026-11-18T11:06:40Z'];
        $items = array_map(static fn (string $t): array => ['namespace' => 'survey', 'id' => 'x', 'parts' => ['a', 'b'], 'data' => null, 'created_at' => $t, 'expires_at' => null], $times);
        $t = new FakeTransport(
            FakeTransport::json(200, ['items' => $items, 'next' => 'YQBiAA']),
            FakeTransport::json(200, ['items' => array_slice($items, 0, 2), 'next' => 'c1']),
            FakeTransport::json(200, ['items' => array_slice($items, 2), 'next' => null]),
            FakeTransport::json(200, ['deleted' => 100000, 'more' => true]),
            FakeTransport::json(200, ['deleted' => 7, 'more' => false]),
            FakeTransport::json(200, ['deleted' => 0, 'more' => true]),
        );
        $c = $this->client($t);
        $page = $c->claims->list('survey', ['a b', 'c/d'], limit: 3, after: 'YQBhAA');
        self::assertSame([$items, 'YQBiAA'], [$page->items, $page->next]);
        self::assertSame('GET', $t->sent[0]['method']);
        self::assertSame('http://idem.test:7070/v1/claims/survey?prefix=a%20b&prefix=c%2Fd&limit=3&after=YQBhAA', $t->sent[0]['url']);
        // Timestamps come as the server wrote them, any precision, and DateTimeImmutable reads each.
        self::assertSame($times, array_column($page->items, 'created_at'));
        self::assertSame(['123000', '900000', '000000'], array_map(static fn (array $r): string => (new \DateTimeImmutable($r['created_at']))->format('u'), $page->items));

        self::assertSame($items, iterator_to_array($c->claims->iterate('survey', 'a', pageSize: 2), false));
        self::assertSame(['http://idem.test:7070/v1/claims/survey?prefix=a&limit=2', 'http://idem.test:7070/v1/claims/survey?prefix=a&limit=2&after=c1'], [$t->sent[1]['url'], $t->sent[2]['url']]);

        self::assertSame(100007, $c->claims->deletePrefix('survey', ['scenario-1', 'user-3']));
        self::assertSame([['DELETE', 'http://idem.test:7070/v1/claims/survey?prefix=scenario-1&prefix=user-3']], array_unique(array_map(static fn (array $s): array => [$s['method'], $s['url']], array_slice($t->sent, 3, 2)), SORT_REGULAR));
        self::assertSame(0, $c->claims->deletePrefix('survey', 'x'), 'an answer that deleted nothing ends the loop');
        self::assertCount(6, $t->sent);
        try {
            $c->claims->list('survey', []);
            self::fail('an empty prefix was sent');
        } catch (\InvalidArgumentException) {
            self::assertCount(6, $t->sent);
        }
    }

    public function testTheTokenIsNeverShown(): void
    {
        $c = $this->client(new FakeTransport(FakeTransport::problem(401, 'unauthorized', 'unknown token')), token: 'hunter2-secret');
        self::assertStringNotContainsString('hunter2', print_r($c, true));
        ob_start();
        var_dump($c);
        self::assertStringNotContainsString('hunter2', (string) ob_get_clean());
        try {
            $c->claims->claim('ns', key: 'k');
        } catch (UnauthorizedException $e) {
            self::assertStringNotContainsString('hunter2', (string) $e);
            self::assertStringNotContainsString('hunter2', print_r($e->getTrace(), true));
        }
    }

    public function testRetries502503504HonouringRetryAfter(): void
    {
        $t = new FakeTransport(
            FakeTransport::problem(503, 'store-unavailable', '', ['Retry-After' => '2']),
            FakeTransport::problem(502, 'upstream-unavailable'),
            FakeTransport::problem(504, 'upstream-timeout'),
            self::record(),
        );
        self::assertTrue($this->client($t)->claims->claim('ns', key: 'k')->claimed);
        self::assertCount(4, $t->sent);
        // Retry-After 2 (plus jitter of at most 10 %), then the backoff of attempts 1 and 2 (0.5, 1.0) with jitter 0.5: 3/4 of each.
        self::assertEqualsWithDelta([2.1, 0.375, 0.75], $this->slept, 1e-9);
    }

    public function testRetriesExhaustedThrowTheLastAnswer(): void
    {
        $busy = FakeTransport::problem(503, 'store-unavailable', 'the store is busy', ['Retry-After' => '0']);
        $t = new FakeTransport($busy, $busy, $busy);
        try {
            $this->client($t, retries: 2)->claims->claim('ns', key: 'k');
            self::fail('no exception');
        } catch (UnavailableException $e) {
            self::assertSame(503, $e->status);
            self::assertSame(IdemException::STORE_UNAVAILABLE, $e->type);
        }
        self::assertCount(3, $t->sent);
    }

    public function testRetriesZeroMeansOneAttemptAndALongRetryAfterIsNotWaited(): void
    {
        $t = new FakeTransport(FakeTransport::problem(503, 'store-unavailable'));
        try {
            $this->client($t)->withOptions(retries: 0)->claims->claim('ns', key: 'k');
        } catch (UnavailableException) {
        }
        self::assertCount(1, $t->sent);
        $t = new FakeTransport(FakeTransport::problem(503, 'store-unavailable', '', ['Retry-After' => '3600']));
        try {
            $this->client($t)->claims->claim('ns', key: 'k');
        } catch (UnavailableException $e) {
            self::assertSame(3600.0, $e->retryAfter);
        }
        self::assertCount(1, $t->sent);
        self::assertSame([], $this->slept);
    }

    public function testConnectionErrorsAreRetriedThenWrapped(): void
    {
        $t = new FakeTransport(new TransportException('Connection refused'), new TransportException('Connection refused'), new TransportException('timed out', true));
        try {
            $this->client($t, retries: 2)->claims->claim('ns', key: 'k');
            self::fail('no exception');
        } catch (ConnectionException $e) {
            self::assertInstanceOf(UnavailableException::class, $e);
            self::assertSame(0, $e->status);
            self::assertSame(IdemException::TIMEOUT, $e->type);
            self::assertStringContainsString('http://idem.test:7070', $e->detail);
            self::assertStringContainsString('3 attempts', $e->detail);
        }
        self::assertCount(2, $this->slept);
    }

    public function testWithOptionsSetsTimeoutAndRetriesForSomeCalls(): void
    {
        $t = new FakeTransport(new TransportException('refused'), self::record(), new TransportException('refused'));
        $c = $this->client($t, token: 'tok');
        $fast = $c->withOptions(timeout: 2.5, retries: 0);
        self::assertTrue($c->claims->claim('ns', key: 'k')->claimed);
        try {
            $fast->claims->claim('ns', key: 'k');
            self::fail('no exception');
        } catch (ConnectionException) {
        }
        self::assertSame(10.0, $t->sent[1]['timeout']);
        self::assertSame(2.5, $t->sent[2]['timeout']);
        self::assertSame('Bearer tok', $t->sent[2]['headers']['Authorization']);
    }

    public function testABeginThatWaitsOnTheServerGetsItsWaitOnTopOfTheTimeout(): void
    {
        $t = new FakeTransport(FakeTransport::json(200, ['status' => 'completed', 'id' => 'i', 'result' => ['n' => 1], 'completed_at' => 'x', 'expires_at' => 'y']));
        $r = $this->client($t)->operations->begin('ns', key: 'k', request: ['a' => 1], leaseSeconds: 5, ttlSeconds: 60, waitSeconds: 20);
        self::assertTrue($r->completed);
        self::assertFalse($r->started);
        self::assertSame(['n' => 1], $r->result);
        self::assertSame(30.0, $t->sent[0]['timeout']);
        $body = $t->body(0);
        unset($body['client_token']);
        self::assertSame(['key' => 'k', 'request' => ['a' => 1], 'lease_seconds' => 5, 'ttl_seconds' => 60, 'wait_seconds' => 20], $body);
    }

    public function testTheUrlIsChecked(): void
    {
        foreach (['ftp://x', 'http://', 'http://user:pw@host:7070', 'localhost:7070'] as $url) {
            try {
                new Client($url);
                self::fail("accepted $url");
            } catch (\InvalidArgumentException) {
                $this->addToAssertionCount(1);
            }
        }
    }

    public function testTheUrlDefaultsToIdemUrl(): void
    {
        $before = getenv('IDEM_URL');
        try {
            putenv('IDEM_URL=http://from-env:9999');
            self::assertSame('http://from-env:9999', (new Client())->url);
            putenv('IDEM_URL=localhost:7070');
            try {
                new Client();
                self::fail('a bad IDEM_URL was accepted');
            } catch (\InvalidArgumentException $e) {
                self::assertStringStartsWith('IDEM_URL must be http:// or https://', $e->getMessage());
            }
            putenv('IDEM_URL');
            self::assertSame(Client::DEFAULT_URL, (new Client())->url);
        } finally {
            putenv($before === false ? 'IDEM_URL' : "IDEM_URL=$before");
        }
    }

    public function testBackoffGrowsExponentiallyWithJitterAndACap(): void
    {
        $low = new RetryPolicy(retries: 10, backoff: 0.25, maxBackoff: 8.0, rand: static fn (): float => 0.0);
        $high = new RetryPolicy(retries: 10, backoff: 0.25, maxBackoff: 8.0, rand: static fn (): float => 0.999999);
        self::assertSame([0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 4.0], array_map([$low, 'backoffDelay'], range(0, 6)));
        self::assertEqualsWithDelta([0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 8.0], array_map([$high, 'backoffDelay'], range(0, 6)), 1e-5);
        self::assertNull($low->delay(10, null));
        self::assertNull($low->forStatus(0, 500, null));
        self::assertNull($low->forStatus(0, 429, 1.0));
    }

    public function testParseRetryAfter(): void
    {
        self::assertSame(5.0, RetryPolicy::parseRetryAfter('5'));
        self::assertSame(0.5, RetryPolicy::parseRetryAfter(' 0.5 '));
        self::assertNull(RetryPolicy::parseRetryAfter(null));
        self::assertNull(RetryPolicy::parseRetryAfter(''));
        self::assertNull(RetryPolicy::parseRetryAfter('-1'));
        self::assertNull(RetryPolicy::parseRetryAfter('soon'));
        $now = (float) strtotime('2015-10-21 07:27:50 UTC');
        self::assertSame(10.0, RetryPolicy::parseRetryAfter('Wed, 21 Oct 2015 07:28:00 GMT', $now));
        self::assertSame(0.0, RetryPolicy::parseRetryAfter('Wed, 21 Oct 2015 07:28:00 GMT', $now + 60));
    }

    public function testReceiptsListSendsTheFilterAndReadsThePage(): void
    {
        $t = new FakeTransport(
            FakeTransport::json(200, ['receipts' => [['id' => 'r1'], ['id' => 'r2']], 'next_cursor' => 'c1']),
            FakeTransport::json(200, ['receipts' => [['id' => 'r3']], 'next_cursor' => null]),
            FakeTransport::json(200, ['matching' => 4]),
        );
        $c = $this->client($t);
        $page = $c->receipts->list(['source' => 'partner', 'status' => 'dead', 'limit' => 2]);
        self::assertSame(['r1', 'r2'], array_column($page->items, 'id'));
        self::assertSame('c1', $page->nextCursor);
        self::assertSame('http://idem.test:7070/v1/receipts?source=partner&status=dead&limit=2', $t->sent[0]['url']);
        $next = $c->receipts->list(['cursor' => $page->nextCursor, 'eventId' => 'evt 1']);
        self::assertNull($next->nextCursor);
        self::assertSame('http://idem.test:7070/v1/receipts?cursor=c1&event_id=evt%201', $t->sent[1]['url']);
        self::assertSame(4, $c->receipts->countMatching(['source' => 'partner', 'createdBefore' => '2026-01-01T00:00:00Z']));
        self::assertSame(['dry_run' => true, 'source' => 'partner', 'created_before' => '2026-01-01T00:00:00Z'], $t->body(2));
        $this->expectException(\InvalidArgumentException::class);
        $c->receipts->list(['sauce' => 'partner']);
    }
}
