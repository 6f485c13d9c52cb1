<?php

declare(strict_types=1);

namespace Idem;

/**
 * The id idem gives a key, computed locally: the lowercase hex SHA-256 of the parts joined by a NUL
 * byte. claimId('k') is the id of key: 'k'; claimId(['a', 'b']) and claimId('a', 'b') are the id
 * of parts: ['a', 'b']. ['a_b', 'c'] and ['a', 'b_c'] never collide. The parts are not checked:
 * the server refuses empty ones, NUL, more than 1 KiB or 16 parts.
 *
 * @param string|list<string> $parts
 */
function claimId(string|array $parts, string ...$more): string
{
    if (is_array($parts)) {
        if ($more !== []) {
            throw new \InvalidArgumentException('give the parts as one list, or as separate strings, not both');
        }
        return Key::id(array_values($parts));
    }
    return Key::id([$parts, ...$more]);
}

/**
 * Verifies a Standard Webhooks request from idem (a delivery to your handler, or a result
 * webhook) and returns its body parsed as JSON (objects as associative arrays).
 *
 *  - $secret: the source's signing_secret, "whsec_" + base64;
 *  - $headers: the request's headers in any usual form: getallheaders(), $_SERVER, Laravel's
 *    $request->headers, a PSR-7 request, or ['webhook-id' => …] with names in any case;
 *  - $body: the raw body exactly as received (file_get_contents('php://input'),
 *    $request->getContent()), never re-encoded JSON.
 *
 * webhook-signature may list several space-separated signatures (during a secret rotation): one
 * matching v1 signature is enough, and each is compared in constant time (hash_equals).
 * webhook-timestamp must be within $tolerance seconds (5 minutes) of $now (default: time()).
 *
 * @throws WebhookVerificationException the request is not to be trusted (answer 401)
 * @throws \InvalidArgumentException the secret is not whsec_ + base64 (a configuration mistake)
 */
function verifyWebhook(
    #[\SensitiveParameter] string $secret,
    array|object $headers,
    string $body,
    int|\DateTimeInterface|null $now = null,
    int $tolerance = Webhook::TOLERANCE,
    bool $parse = true,
): mixed {
    return Webhook::verify($secret, $headers, $body, $now, $tolerance, $parse);
}

/** The webhook-signature value ("v1,<base64>") idem would send for this id, timestamp and body: for tests of your own handler. */
function signWebhook(#[\SensitiveParameter] string $secret, string $id, int|\DateTimeInterface $timestamp, string $body): string
{
    return Webhook::sign($secret, $id, $timestamp, $body);
}
