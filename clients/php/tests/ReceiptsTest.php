<?php

declare(strict_types=1);

namespace Idem\Tests;

use Idem\Client;
use Idem\IdemException;
use Idem\Tests\Support\FakeServer;
use Idem\Tests\Support\IdemServer;
use Idem\Tests\Support\IdemTestCase;

use function Idem\verifyWebhook;

/**
 * Receipts against a real `idem serve` with two sources: `dead-end`, whose handler never answers
 * (each event dies after one attempt), and `signed`, whose handler is a fake HTTP server that
 * records idem's signed deliveries for verifyWebhook() to check.
 */
final class ReceiptsTest extends IdemTestCase
{
    private const SECRET = 'whsec_cGhwLWNsaWVudC10ZXN0LXNpZ25pbmctc2VjcmV0LTAx';

    private static FakeServer $handler;
    private static string $config;

    public static function setUpBeforeClass(): void
    {
        self::$handler = new FakeServer();
        $closed = IdemServer::freePort();
        $handler = self::$handler->url;
        $secret = self::SECRET;
        self::$config = <<<TOML
            [[sources]]
            name = "dead-end"
            handler_url = "http://127.0.0.1:$closed/handle"
            event_id = "/external_event_id"
            max_attempts = 1
            backoff = ["100ms"]
            signing_secret = "$secret"

            [[sources]]
            name = "signed"
            handler_url = "$handler/handle"
            event_id = "/external_event_id"
            max_attempts = 1
            signing_secret = "$secret"

            TOML;
    }

    public static function tearDownAfterClass(): void
    {
        self::$handler->stop();
    }

    private static function idem(): Client
    {
        return self::client(config: self::$config);
    }

    /** A partner's event, posted to idem's intake. */
    private static function send(string $source, array $event): string
    {
        $context = stream_context_create(['http' => ['method' => 'POST', 'header' => 'Content-Type: application/json', 'content' => json_encode($event), 'ignore_errors' => true]]);
        $answer = json_decode((string) file_get_contents(self::server(self::$config)->url . "/v1/sources/$source/events", false, $context), true);
        self::assertArrayHasKey('receipt_id', $answer, json_encode($answer));
        return $answer['receipt_id'];
    }

    private static function waitFor(Client $idem, string $id, string $status): array
    {
        $deadline = microtime(true) + 15;
        do {
            $receipt = $idem->receipts->get($id);
            if (($receipt['status'] ?? null) === $status) {
                return $receipt;
            }
            usleep(50_000);
        } while (microtime(true) < $deadline);
        self::fail("receipt $id is " . ($receipt['status'] ?? 'absent') . ", not $status");
    }

    public function testListGetReplayAndDiscard(): void
    {
        $idem = self::idem();
        $run = bin2hex(random_bytes(4));
        $ids = [];
        foreach ([1, 2, 3] as $n) {
            $ids[] = self::send('dead-end', ['external_event_id' => "evt-$run-$n", 'n' => $n]);
        }
        foreach ($ids as $id) {
            $receipt = self::waitFor($idem, $id, 'dead');
        }
        self::assertSame('dead-end', $receipt['source']);
        self::assertSame("evt-$run-3", $receipt['event_id']);
        self::assertNotEmpty($receipt['attempts']);

        $page = $idem->receipts->list(['source' => 'dead-end', 'status' => 'dead', 'limit' => 2]);
        self::assertCount(2, $page->items);
        self::assertNotNull($page->nextCursor);
        $all = iterator_to_array($idem->receipts->iterate(['source' => 'dead-end', 'status' => 'dead', 'limit' => 2]), false);
        self::assertSame([], array_diff($ids, array_column($all, 'id')), 'iterate() follows the cursor to every page');
        self::assertSame([$ids[1]], array_column($idem->receipts->list(['eventId' => "evt-$run-2"])->items, 'id'));

        $replayed = $idem->receipts->replay($ids[0]);
        self::assertSame($ids[0], $replayed['receipt_id']);
        self::assertTrue($replayed['replayed']);
        self::waitFor($idem, $ids[0], 'dead');

        $discarded = $idem->receipts->discard($ids[1]);
        self::assertSame('discarded', $discarded['status']);
        self::assertGreaterThanOrEqual(1, $idem->receipts->countMatching(['source' => 'dead-end']));
        self::assertNull($idem->receipts->get('rcpt_' . str_repeat('0', 36)));
    }

    public function testReplayOfAnUnknownReceiptIsAnError(): void
    {
        try {
            self::idem()->receipts->replay('rcpt_' . str_repeat('0', 36));
            self::fail('no exception');
        } catch (IdemException $e) {
            self::assertSame(404, $e->status);
        }
    }

    /** idem's own signature on a real delivery, checked by verifyWebhook() with the source's secret. */
    public function testIdemsDeliveriesVerify(): void
    {
        self::$handler->queue(['status' => 204]);
        $event = ['external_event_id' => 'evt-signed-' . bin2hex(random_bytes(4)), 'amount' => 4200, 'note' => 'café'];
        $id = self::send('signed', $event);
        self::waitFor(self::idem(), $id, 'completed');
        $delivery = self::$handler->requests()[0];
        self::assertSame($id, $delivery['headers']['webhook-id']);
        self::assertSame($event, verifyWebhook(self::SECRET, $delivery['headers'], $delivery['body']));
        $this->expectException(\Idem\WebhookVerificationException::class);
        verifyWebhook(self::SECRET, $delivery['headers'], str_replace('4200', '4201', $delivery['body']));
    }
}
