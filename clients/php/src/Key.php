<?php

declare(strict_types=1);

namespace Idem;

/**
 * Keys and ids, computed as the server does (docs/reference/api.md#keys-and-namespaces), and the
 * key members of request bodies. Internal: use Idem\claimId() and the key:/parts:/id: arguments.
 *
 * @internal
 */
final class Key
{
    /** The server's id of a key: lowercase hex SHA-256 of the parts joined by a NUL byte. */
    public static function id(array $parts): string
    {
        foreach ($parts as $part) {
            if (!is_string($part)) {
                throw new \InvalidArgumentException('key parts must be strings, not ' . get_debug_type($part));
            }
        }
        return hash('sha256', implode("\0", $parts));
    }

    /**
     * {"key": …} or {"parts": […]}: exactly one of the two.
     *
     * @param list<string>|null $parts
     * @return array<string, mixed>
     */
    public static function body(?string $key, ?array $parts): array
    {
        if (($key === null) === ($parts === null)) {
            throw new \InvalidArgumentException('give exactly one of key: or parts:');
        }
        return $key !== null ? ['key' => $key] : ['parts' => self::parts($parts)];
    }

    /** The record id from exactly one of id:, key: or parts:. */
    public static function resolve(?string $id, ?string $key, ?array $parts): string
    {
        $given = ($id !== null) + ($key !== null) + ($parts !== null);
        if ($given !== 1) {
            throw new \InvalidArgumentException('give exactly one of id:, key: or parts:');
        }
        if ($id !== null) {
            return $id;
        }
        return self::id($key !== null ? [$key] : self::parts($parts));
    }

    /**
     * One item of a batch or lookup: an array as the API takes it (['key' => …, 'data' => …,
     * 'ttl_seconds' => …]), a string (a key) or a list of strings (parts).
     *
     * @return array<string, mixed>
     */
    public static function item(mixed $item): array
    {
        if (is_string($item)) {
            return ['key' => $item];
        }
        if (!is_array($item) || $item === []) {
            throw new \InvalidArgumentException('an item is a key (string), parts (list of strings) or an array with key or parts, not ' . get_debug_type($item));
        }
        return array_is_list($item) ? ['parts' => self::parts($item)] : $item;
    }

    /** @return list<string> */
    private static function parts(array $parts): array
    {
        if (!array_is_list($parts)) {
            throw new \InvalidArgumentException('parts must be a list of strings (use key: for a single string)');
        }
        foreach ($parts as $part) {
            if (!is_string($part)) {
                throw new \InvalidArgumentException('key parts must be strings, not ' . get_debug_type($part));
            }
        }
        return $parts;
    }

    /**
     * A client_token: a random UUID (version 4), made once per logical call and sent unchanged on
     * each of its retries, so that a retry whose first answer was lost learns what it did.
     */
    public static function clientToken(): string
    {
        $bytes = random_bytes(16);
        $bytes[6] = chr((ord($bytes[6]) & 0x0f) | 0x40);
        $bytes[8] = chr((ord($bytes[8]) & 0x3f) | 0x80);
        return vsprintf('%s%s-%s-%s-%s-%s%s%s', str_split(bin2hex($bytes), 4));
    }
}
