<?php

declare(strict_types=1);

namespace Idem;

/**
 * Standard Webhooks (https://www.standardwebhooks.com/) as idem signs its deliveries and result
 * webhooks: webhook-signature lists space-separated "v1,<base64 HMAC-SHA256 of
 * "{webhook-id}.{webhook-timestamp}.{raw body}">" (several during a secret rotation: one match is
 * enough), and webhook-timestamp must be within 5 minutes of now. Use Idem\verifyWebhook() and
 * Idem\signWebhook(); this class holds their work.
 */
final class Webhook
{
    /** How far webhook-timestamp may be from now, in seconds. */
    public const TOLERANCE = 300;

    private const PREFIX = 'whsec_';

    /**
     * @param array<string, string|list<string>>|iterable<string, string|list<string>>|object $headers
     * @return mixed the body parsed as JSON (objects as associative arrays), or the raw body when $parse is false
     */
    public static function verify(
        #[\SensitiveParameter] string $secret,
        array|object $headers,
        string $body,
        int|\DateTimeInterface|null $now = null,
        int $tolerance = self::TOLERANCE,
        bool $parse = true,
    ): mixed {
        $key = self::key($secret);
        $h = self::headers($headers, ['webhook-id', 'webhook-timestamp', 'webhook-signature']);
        $id = $h['webhook-id'][0] ?? '';
        $timestamp = trim($h['webhook-timestamp'][0] ?? '');
        $signatures = trim(implode(' ', $h['webhook-signature'] ?? []));
        if ($id === '' || $timestamp === '' || $signatures === '') {
            throw new WebhookVerificationException('missing webhook-id, webhook-timestamp or webhook-signature header');
        }
        if (!preg_match('/^\d{1,15}$/', $timestamp)) {
            throw new WebhookVerificationException('webhook-timestamp is not a Unix time in seconds');
        }
        $current = $now instanceof \DateTimeInterface ? $now->getTimestamp() : ($now ?? time());
        if ((int) $timestamp < $current - $tolerance) {
            throw new WebhookVerificationException('webhook-timestamp is too old (more than ' . $tolerance . ' s ago)');
        }
        if ((int) $timestamp > $current + $tolerance) {
            throw new WebhookVerificationException('webhook-timestamp is too new (more than ' . $tolerance . ' s ahead)');
        }
        $expected = hash_hmac('sha256', "$id.$timestamp.$body", $key, true);
        $matched = false;
        foreach (preg_split('/\s+/', $signatures) ?: [] as $entry) {
            [$version, $signature] = array_pad(explode(',', $entry, 2), 2, '');
            $candidate = base64_decode($signature, true);
            if ($version !== 'v1' || $candidate === false) {
                continue;
            }
            // Constant time, and every candidate compared: no timing leak of which one matched.
            $matched = hash_equals($expected, $candidate) || $matched;
        }
        if (!$matched) {
            throw new WebhookVerificationException('no matching webhook signature');
        }
        if (!$parse) {
            return $body;
        }
        try {
            return json_decode($body, true, 512, JSON_THROW_ON_ERROR | JSON_BIGINT_AS_STRING);
        } catch (\JsonException) {
            throw new WebhookVerificationException('the webhook body is not JSON (pass parse: false for other bodies)');
        }
    }

    /** The webhook-signature value ("v1,<base64>") idem would send: for tests of your own handler. */
    public static function sign(
        #[\SensitiveParameter] string $secret,
        string $id,
        int|\DateTimeInterface $timestamp,
        string $body,
    ): string {
        $ts = $timestamp instanceof \DateTimeInterface ? $timestamp->getTimestamp() : $timestamp;
        return 'v1,' . base64_encode(hash_hmac('sha256', "$id.$ts.$body", self::key($secret), true));
    }

    /** The key's bytes: "whsec_" + base64 (or plain base64; missing padding tolerated). */
    private static function key(#[\SensitiveParameter] string $secret): string
    {
        $text = trim($secret);
        if (str_starts_with($text, self::PREFIX)) {
            $text = substr($text, strlen(self::PREFIX));
        }
        $padded = $text . str_repeat('=', (4 - strlen($text) % 4) % 4);
        $key = base64_decode($padded, true);
        if ($key === false || $key === '') {
            throw new \InvalidArgumentException('the webhook secret must be whsec_ followed by base64 (the source\'s signing_secret)');
        }
        return $key;
    }

    /**
     * The wanted headers' values, whatever form the headers come in: ['Webhook-Id' => '…'],
     * getallheaders(), $_SERVER (HTTP_WEBHOOK_ID), PSR-7 / Symfony ['webhook-id' => ['…']], an
     * iterable such as Laravel's $request->headers, or a PSR-7 message (getHeaderLine()).
     *
     * @param list<string> $wanted lowercase names
     * @return array<string, list<string>>
     */
    private static function headers(array|object $headers, array $wanted): array
    {
        $found = [];
        if (!is_iterable($headers)) {
            if (!method_exists($headers, 'getHeaderLine')) {
                throw new \InvalidArgumentException('headers must be an array, an iterable or a PSR-7 message, not ' . get_debug_type($headers));
            }
            foreach ($wanted as $name) {
                $line = (string) $headers->getHeaderLine($name);
                if ($line !== '') {
                    $found[$name] = [$line];
                }
            }
            return $found;
        }
        foreach ($headers as $name => $value) {
            $name = strtolower((string) $name);
            if (str_starts_with($name, 'http_')) {
                $name = substr($name, 5); // $_SERVER's HTTP_WEBHOOK_ID
            }
            $name = str_replace('_', '-', $name);
            if (!in_array($name, $wanted, true)) {
                continue;
            }
            foreach (is_array($value) ? $value : [$value] as $one) {
                $found[$name][] = (string) $one;
            }
        }
        return $found;
    }
}
