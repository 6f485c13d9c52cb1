<?php

declare(strict_types=1);

namespace Idem\Tests;

use Idem\Client;
use PHPUnit\Framework\TestCase;

/** The client carries the project's version, the same as composer.json's and the Python client's. */
final class VersionTest extends TestCase
{
    public function testOneVersion(): void
    {
        $composer = json_decode((string) file_get_contents(dirname(__DIR__) . '/composer.json'), true, 512, JSON_THROW_ON_ERROR);
        self::assertSame(Client::VERSION, $composer['version']);
        self::assertSame('idem/client', $composer['name']);
        self::assertSame('>=8.1', $composer['require']['php']);
        self::assertSame(['Idem\\' => 'src/'], $composer['autoload']['psr-4']);
        $python = (string) file_get_contents(dirname(__DIR__, 2) . '/python/src/idem_client/_version.py');
        self::assertSame("__version__ = \"" . Client::VERSION . "\"", trim($python));
    }
}
