<?php

declare(strict_types=1);

namespace Idem\Tests;

use PHPUnit\Framework\TestCase;

use function Idem\claimId;

/** Idem\claimId() against the vectors every client and the server check (clients/testdata/claim_ids.json). */
final class ClaimIdTest extends TestCase
{
    /** @return iterable<string, array{array<string, mixed>}> */
    public static function vectors(): iterable
    {
        $file = json_decode((string) file_get_contents(dirname(__DIR__, 2) . '/testdata/claim_ids.json'), true, 512, JSON_THROW_ON_ERROR);
        foreach ($file['vectors'] as $i => $vector) {
            yield "vector $i " . json_encode($vector['parts'], JSON_UNESCAPED_UNICODE) => [$vector];
        }
    }

    /** @dataProvider vectors */
    public function testTheServersIds(array $vector): void
    {
        self::assertSame($vector['id'], claimId($vector['parts']));
        self::assertSame($vector['id'], claimId(...$vector['parts']));
        if (isset($vector['key'])) {
            self::assertSame($vector['id'], claimId($vector['key']));
        }
    }

    public function testTheFileHoldsEnoughVectors(): void
    {
        self::assertGreaterThanOrEqual(6, iterator_count(self::vectors()));
    }

    public function testPartsNeverCollideAcrossTheSeparator(): void
    {
        self::assertNotSame(claimId(['a_b', 'c']), claimId(['a', 'b_c']));
        self::assertNotSame(claimId(['ab', 'c']), claimId(['abc']));
        self::assertSame(hash('sha256', "scenario-1\0user-3"), claimId(['scenario-1', 'user-3']));
    }

    public function testAListAndSeparateStringsAreNotMixed(): void
    {
        $this->expectException(\InvalidArgumentException::class);
        claimId(['a'], 'b');
    }

    public function testPartsMustBeStrings(): void
    {
        $this->expectException(\InvalidArgumentException::class);
        claimId(['a', 3]);
    }
}
