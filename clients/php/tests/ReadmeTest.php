<?php

declare(strict_types=1);

namespace Idem\Tests;

use Idem\Tests\Support\IdemTestCase;

/** The README's code: every block parses, and its quick start and claims run against a real idem. */
final class ReadmeTest extends IdemTestCase
{
    /** @return list<string> the README's ```php blocks */
    private static function blocks(): array
    {
        preg_match_all('/^```php\n(.*?)^```/ms', (string) file_get_contents(dirname(__DIR__) . '/README.md'), $m);
        return $m[1];
    }

    private static function runPhp(string $code, array $args = []): array
    {
        $file = tempnam(sys_get_temp_dir(), 'idem-readme-');
        file_put_contents($file, $code);
        $process = proc_open([PHP_BINARY, ...$args, $file], [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $out = stream_get_contents($pipes[1]) . stream_get_contents($pipes[2]);
        $code = proc_close($process);
        unlink($file);
        return [$code, $out];
    }

    public function testEveryBlockParses(): void
    {
        $blocks = self::blocks();
        self::assertGreaterThanOrEqual(10, count($blocks));
        foreach ($blocks as $i => $block) {
            [$code, $out] = self::runPhp("<?php\n$block", ['-l']);
            self::assertSame(0, $code, "block $i:\n$block\n$out");
        }
    }

    public function testTheQuickStartAndTheClaimsRun(): void
    {
        $blocks = array_values(array_filter(self::blocks(), static fn (string $b): bool => str_contains($b, '$idem->claims->claim(')));
        self::assertCount(3, $blocks, 'the quick start, the claims section and the seed scenarios');
        [$quickStart, $claims] = $blocks;
        $prelude = '<?php require ' . var_export(dirname(__DIR__) . '/autoload.php', true) . ";\n"
            . "function createOrder(array \$cart): array { return ['order' => 1] + \$cart; }\n"
            . "\$orderKey = 'o-' . bin2hex(random_bytes(4)); \$cart = ['sku' => 'a'];\n";
        $code = $prelude . str_replace(["'http://127.0.0.1:7070'", "'survey'", "'articles'", "'orders'"], [var_export(self::server()->url, true), "'readme-survey'", "'readme-articles'", "'readme-orders'"], $quickStart . $claims)
            . "\necho 'ok:', json_encode([\$r->claimed, \$order, count(\$results)]);\n";
        [$exit, $out] = self::runPhp($code);
        self::assertSame(0, $exit, $out);
        self::assertStringContainsString('ok:[', $out);
        self::assertStringContainsString('"order":1', $out);
    }
}
