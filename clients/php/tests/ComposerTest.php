<?php

declare(strict_types=1);

namespace Idem\Tests;

use Idem\Tests\Support\IdemServer;
use Idem\Tests\Support\IdemTestCase;

/**
 * The package as a Composer user gets it: composer.json validates, and a fresh project requiring
 * idem/client ^0.1 through a path repository (Packagist off, no network) installs a copy of it and
 * claims through vendor/autoload.php alone. Skipped, saying so, without Debian's composer.
 */
final class ComposerTest extends IdemTestCase
{
    private static function composer(string $dir, string ...$args): array
    {
        $composer = trim((string) shell_exec('command -v composer'));
        if ($composer === '') {
            self::markTestSkipped('SKIPPED: composer is not installed (Debian: apt-get install composer; .ci/run installs it)');
        }
        $env = IdemServer::childEnv(['COMPOSER_HOME' => "$dir/.composer-home", 'COMPOSER_DISABLE_NETWORK' => '1', 'COMPOSER_NO_INTERACTION' => '1']);
        $process = proc_open([$composer, ...$args], [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes, $dir, $env);
        $out = stream_get_contents($pipes[1]) . stream_get_contents($pipes[2]);
        return [proc_close($process), $out];
    }

    public function testAFreshProjectInstallsItAndClaims(): void
    {
        $dir = sys_get_temp_dir() . '/idem-php-composer-' . bin2hex(random_bytes(4));
        mkdir($dir);
        try {
            [$code, $out] = self::composer(dirname(__DIR__), 'validate', '--no-check-publish', '--working-dir=' . dirname(__DIR__));
            self::assertSame(0, $code, $out);

            file_put_contents("$dir/composer.json", json_encode([
                'name' => 'acme/app',
                'repositories' => [['type' => 'path', 'url' => dirname(__DIR__), 'options' => ['symlink' => false]], ['packagist.org' => false]],
                'require' => ['idem/client' => '^0.1'],
            ], JSON_PRETTY_PRINT | JSON_UNESCAPED_SLASHES));
            [$code, $out] = self::composer($dir, 'install', '--no-progress');
            self::assertSame(0, $code, $out);
            self::assertStringContainsString('idem/client (0.1.0)', $out);
            self::assertFalse(is_link("$dir/vendor/idem/client"), 'a copy, not a link into the repository');

            file_put_contents("$dir/app.php", '<?php require __DIR__ . "/vendor/autoload.php";'
                . '$idem = new Idem\Client($argv[1]);'
                . '$r = $idem->claims->claim("composer-" . bin2hex(random_bytes(4)), parts: ["a", "b"]);'
                . 'echo json_encode([$r->claimed, $r->id === Idem\claimId("a", "b"), Idem\Client::VERSION]);');
            $process = proc_open([PHP_BINARY, "$dir/app.php", self::server()->url], [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes, $dir);
            $out = stream_get_contents($pipes[1]) . stream_get_contents($pipes[2]);
            self::assertSame(0, proc_close($process), $out);
            self::assertSame('[true,true,"0.1.0"]', $out);
        } finally {
            IdemServer::removeTree($dir);
        }
    }
}
