<?php

declare(strict_types=1);

namespace Idem;

/**
 * What a call needs of a success answer's body. A 2xx answer without these fields (a server that
 * answers `200 {}` or an HTML page to anything) is not idem's: the call throws the not-idem
 * IdemException naming the URL instead of reading it as a result (claimed missing is not
 * claimed false).
 *
 * @internal
 */
final class Shape
{
    /** @param \Closure(mixed): bool $fits given the body decoded with objects as \stdClass */
    private function __construct(public readonly string $expected, private readonly \Closure $fits)
    {
    }

    /** Whether the answer's body (JSON text) has the shape. */
    public function fits(string $body): bool
    {
        try {
            $decoded = json_decode($body, false, 512, JSON_THROW_ON_ERROR | JSON_BIGINT_AS_STRING);
        } catch (\JsonException) {
            return false;
        }
        return ($this->fits)($decoded);
    }

    /**
     * An object with these fields, of these kinds ('string', 'boolean', 'integer', 'array').
     *
     * @param array<string, string> $fields
     */
    public static function of(array $fields): self
    {
        return new self(self::describe($fields), static fn (mixed $body): bool => self::has($body, $fields));
    }

    /**
     * {$name: [item…]}, each item an object with $fields.
     *
     * @param array<string, string> $fields
     */
    public static function listOf(string $name, array $fields): self
    {
        return new self(
            '{ ' . $name . ': [' . self::describe($fields) . ', …] }',
            static function (mixed $body) use ($name, $fields): bool {
                if (!$body instanceof \stdClass || !is_array($body->{$name} ?? null)) {
                    return false;
                }
                foreach ($body->{$name} as $item) {
                    if (!self::has($item, $fields)) {
                        return false;
                    }
                }
                return true;
            },
        );
    }

    public static function claim(): self
    {
        return self::of(['claimed' => 'boolean', 'id' => 'string']);
    }

    /** A begin's answer: started with its lease token, or completed. */
    public static function begin(): self
    {
        return new self(
            '{ status: "started", id: string, token: string } or { status: "completed", id: string, result }',
            static fn (mixed $b): bool => $b instanceof \stdClass && is_string($b->id ?? null)
                && ((($b->status ?? null) === 'started' && is_string($b->token ?? null) && $b->token !== '')
                    || ($b->status ?? null) === 'completed'),
        );
    }

    public static function completed(): self
    {
        return new self(
            '{ status: "completed", id: string, result }',
            static fn (mixed $b): bool => $b instanceof \stdClass && ($b->status ?? null) === 'completed' && is_string($b->id ?? null),
        );
    }

    /** @param array<string, string> $fields */
    private static function has(mixed $body, array $fields): bool
    {
        if (!$body instanceof \stdClass) {
            return false;
        }
        foreach ($fields as $name => $kind) {
            $value = $body->{$name} ?? null;
            $ok = match ($kind) {
                'string' => is_string($value),
                'boolean' => is_bool($value),
                'integer' => is_int($value),
                'array' => is_array($value),
            };
            if (!$ok) {
                return false;
            }
        }
        return true;
    }

    /** @param array<string, string> $fields */
    private static function describe(array $fields): string
    {
        $parts = [];
        foreach ($fields as $name => $kind) {
            $parts[] = "$name: $kind";
        }
        return '{ ' . implode(', ', $parts) . ' }';
    }
}
