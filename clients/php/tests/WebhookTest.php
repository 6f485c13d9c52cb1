<?php

declare(strict_types=1);

namespace Idem\Tests;

use Idem\WebhookVerificationException;
use PHPUnit\Framework\TestCase;

use function Idem\signWebhook;
use function Idem\verifyWebhook;

/**
 * Idem\verifyWebhook(): the Standard Webhooks test vector, signatures made by an independent
 * implementation (Python's standardwebhooks package, as the Python client's tests use it), every
 * form PHP's headers come in, and every way a forgery can look.
 */
final class WebhookTest extends TestCase
{
    // The Standard Webhooks reference vector (the spec's libraries all test against it).
    private const VECTOR_SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
    private const VECTOR_ID = 'msg_p5jXN8AQM9LWM0D4loKWxJek';
    private const VECTOR_TS = 1614265330;
    private const VECTOR_BODY = '{"test": 2432232314}';
    private const VECTOR_SIG = 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=';

    private const BODY = '{"external_event_id":"evt-1","amount":120,"note":"café ☕"}';

    private static string $secret;
    private static string $other;

    public static function setUpBeforeClass(): void
    {
        self::$secret = 'whsec_' . base64_encode(random_bytes(32));
        self::$other = 'whsec_' . base64_encode(random_bytes(32));
    }

    /** @return array<string, string> */
    private static function headers(string $secret, string $body, int $ts, string $id = 'rcpt_01'): array
    {
        return ['webhook-id' => $id, 'webhook-timestamp' => (string) $ts, 'webhook-signature' => signWebhook($secret, $id, $ts, $body)];
    }

    public function testTheStandardWebhooksVector(): void
    {
        $headers = ['webhook-id' => self::VECTOR_ID, 'webhook-timestamp' => (string) self::VECTOR_TS, 'webhook-signature' => self::VECTOR_SIG];
        self::assertSame(['test' => 2432232314], verifyWebhook(self::VECTOR_SECRET, $headers, self::VECTOR_BODY, now: self::VECTOR_TS));
        self::assertSame(self::VECTOR_SIG, signWebhook(self::VECTOR_SECRET, self::VECTOR_ID, self::VECTOR_TS, self::VECTOR_BODY));
        $this->expectException(WebhookVerificationException::class);
        verifyWebhook(self::VECTOR_SECRET, $headers, self::VECTOR_BODY); // now: years after the vector
    }

    public function testReturnsTheParsedJsonOrTheRawBody(): void
    {
        $headers = self::headers(self::$secret, self::BODY, time());
        self::assertSame(['external_event_id' => 'evt-1', 'amount' => 120, 'note' => 'café ☕'], verifyWebhook(self::$secret, $headers, self::BODY));
        self::assertSame(self::BODY, verifyWebhook(self::$secret, $headers, self::BODY, parse: false));
    }

    public function testEveryFormOfHeaders(): void
    {
        $h = self::headers(self::$secret, self::BODY, time());
        $forms = [
            'getallheaders()' => ['Webhook-Id' => $h['webhook-id'], 'Webhook-Timestamp' => $h['webhook-timestamp'], 'Webhook-Signature' => $h['webhook-signature'], 'Host' => 'x'],
            '$_SERVER' => ['HTTP_WEBHOOK_ID' => $h['webhook-id'], 'HTTP_WEBHOOK_TIMESTAMP' => $h['webhook-timestamp'], 'HTTP_WEBHOOK_SIGNATURE' => $h['webhook-signature'], 'REQUEST_METHOD' => 'POST'],
            'PSR-7 / Symfony arrays of values' => array_map(static fn (string $v): array => [$v], $h),
            'an iterable (Laravel $request->headers)' => new \ArrayIterator(array_map(static fn (string $v): array => [$v], $h)),
            'a PSR-7 message' => new class ($h) {
                public function __construct(private array $h)
                {
                }

                public function getHeaderLine(string $name): string
                {
                    return $this->h[strtolower($name)] ?? '';
                }
            },
        ];
        foreach ($forms as $what => $headers) {
            self::assertSame(120, verifyWebhook(self::$secret, $headers, self::BODY)['amount'], $what);
        }
    }

    public function testSeveralSignaturesOneMatchingIsEnough(): void
    {
        $now = time();
        $mine = self::headers(self::$secret, self::BODY, $now)['webhook-signature'];
        $theirs = self::headers(self::$other, self::BODY, $now)['webhook-signature'];
        $base = ['webhook-id' => 'rcpt_01', 'webhook-timestamp' => (string) $now];
        foreach (["$theirs $mine", "$mine $theirs", "v0,abc $theirs  $mine", "v1,!!! $mine"] as $signatures) {
            self::assertSame(120, verifyWebhook(self::$secret, $base + ['webhook-signature' => $signatures], self::BODY)['amount'], $signatures);
        }
        // The same header twice (a proxy that split it) counts as one list.
        self::assertSame(120, verifyWebhook(self::$secret, $base + ['webhook-signature' => [$theirs, $mine]], self::BODY)['amount']);
        $this->expectException(WebhookVerificationException::class);
        verifyWebhook(self::$secret, $base + ['webhook-signature' => $theirs], self::BODY);
    }

    public function testTheTimestampToleranceIsFiveMinutes(): void
    {
        $ts = 1_700_000_000;
        $headers = self::headers(self::$secret, self::BODY, $ts);
        self::assertIsArray(verifyWebhook(self::$secret, $headers, self::BODY, now: $ts + 299));
        self::assertIsArray(verifyWebhook(self::$secret, $headers, self::BODY, now: $ts - 299));
        self::assertIsArray(verifyWebhook(self::$secret, $headers, self::BODY, now: new \DateTimeImmutable('@' . ($ts + 10))));
        foreach ([$ts + 301 => 'too old', $ts - 301 => 'too new'] as $now => $why) {
            try {
                verifyWebhook(self::$secret, $headers, self::BODY, now: $now);
                self::fail("accepted a timestamp $why");
            } catch (WebhookVerificationException $e) {
                self::assertStringContainsString($why, $e->getMessage());
            }
        }
    }

    public function testForgeriesAreRefused(): void
    {
        $now = time();
        $h = self::headers(self::$secret, self::BODY, $now);
        $forgeries = [
            'another body' => [self::$secret, $h, str_replace('120', '121', self::BODY)],
            'another secret' => [self::$other, $h, self::BODY],
            'another webhook-id' => [self::$secret, ['webhook-id' => 'rcpt_02'] + $h, self::BODY],
            'another timestamp' => [self::$secret, ['webhook-timestamp' => (string) ($now + 1)] + $h, self::BODY],
            'a timestamp that is no number' => [self::$secret, ['webhook-timestamp' => 'yesterday'] + $h, self::BODY],
            'a v2 signature' => [self::$secret, ['webhook-signature' => 'v2,' . substr($h['webhook-signature'], 3)] + $h, self::BODY],
            'a signature that is no base64' => [self::$secret, ['webhook-signature' => 'v1,not base64!'] + $h, self::BODY],
            'a truncated signature' => [self::$secret, ['webhook-signature' => substr($h['webhook-signature'], 0, 20)] + $h, self::BODY],
            'no webhook-id' => [self::$secret, array_diff_key($h, ['webhook-id' => 1]), self::BODY],
            'no webhook-timestamp' => [self::$secret, array_diff_key($h, ['webhook-timestamp' => 1]), self::BODY],
            'no webhook-signature' => [self::$secret, array_diff_key($h, ['webhook-signature' => 1]), self::BODY],
            'an empty webhook-signature' => [self::$secret, ['webhook-signature' => ' '] + $h, self::BODY],
        ];
        foreach ($forgeries as $what => [$secret, $headers, $body]) {
            try {
                verifyWebhook($secret, $headers, $body);
                self::fail("accepted $what");
            } catch (WebhookVerificationException) {
                $this->addToAssertionCount(1);
            }
        }
    }

    public function testABodyThatIsNotJsonNeedsParseFalse(): void
    {
        $body = "\x00binary\xff";
        $headers = self::headers(self::$secret, $body, time(), 'm');
        self::assertSame($body, verifyWebhook(self::$secret, $headers, $body, parse: false));
        $this->expectExceptionMessage('not JSON');
        verifyWebhook(self::$secret, $headers, $body);
    }

    public function testASecretThatIsNotBase64IsAConfigurationMistake(): void
    {
        $headers = self::headers(self::$secret, self::BODY, time());
        foreach (['whsec_%%%', 'whsec_', ''] as $secret) {
            try {
                verifyWebhook($secret, $headers, self::BODY);
                self::fail("accepted the secret '$secret'");
            } catch (\InvalidArgumentException $e) {
                self::assertNotInstanceOf(WebhookVerificationException::class, $e);
            }
        }
        // Plain base64, and base64 without its padding, are the same key.
        $raw = substr(self::$secret, 6);
        self::assertSame(120, verifyWebhook($raw, $headers, self::BODY)['amount']);
        self::assertSame(120, verifyWebhook(rtrim(self::$secret, '='), $headers, self::BODY)['amount']);
    }

    /** The reference implementation (PyPI standardwebhooks) signs; PHP verifies. And the other way round. */
    public function testAgainstTheReferenceImplementation(): void
    {
        $now = time();
        $script = <<<'PY'
import json, sys
from datetime import datetime, timezone
from standardwebhooks.webhooks import Webhook
secret, msg_id, ts, body, our_sig = sys.argv[1:6]
wh = Webhook(secret)
theirs = wh.sign(msg_id, datetime.fromtimestamp(int(ts), tz=timezone.utc), body)
ok = wh.verify(body, {"webhook-id": msg_id, "webhook-timestamp": ts, "webhook-signature": our_sig})
print(json.dumps({"signature": theirs, "verified": ok}))
PY;
        $ours = signWebhook(self::$secret, 'rcpt_9', $now, self::BODY);
        $out = self::python($script, [self::$secret, 'rcpt_9', (string) $now, self::BODY, $ours]);
        self::assertSame(json_decode(self::BODY, true), $out['verified'], 'the reference verifies our signature');
        $headers = ['webhook-id' => 'rcpt_9', 'webhook-timestamp' => (string) $now, 'webhook-signature' => $out['signature']];
        self::assertSame(json_decode(self::BODY, true), verifyWebhook(self::$secret, $headers, self::BODY));
        self::assertSame($ours, $out['signature']);
    }

    /** Runs a Python script with the standardwebhooks package; skips (loudly) where it is missing. */
    private static function python(string $script, array $args): array
    {
        $python = trim((string) shell_exec('command -v python3'));
        if ($python === '' || trim((string) shell_exec("$python -c 'import standardwebhooks' 2>&1 && echo yes")) !== 'yes') {
            self::markTestSkipped('SKIPPED: python3 with the standardwebhooks package is missing (pip install standardwebhooks; .ci/run installs it)');
        }
        $process = proc_open([$python, '-c', $script, ...$args], [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $out = stream_get_contents($pipes[1]);
        $err = stream_get_contents($pipes[2]);
        $code = proc_close($process);
        self::assertSame(0, $code, "python: $err");
        return json_decode((string) $out, true, 512, JSON_THROW_ON_ERROR);
    }
}
