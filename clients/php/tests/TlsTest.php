<?php

declare(strict_types=1);

namespace Idem\Tests;

use Idem\Client;
use Idem\ConnectionException;
use Idem\Http\StreamTransport;
use Idem\Tests\Support\IdemServer;
use Idem\Tests\Support\IdemTestCase;

/** https:// through PHP's streams: idem with [tls] and a certificate made here, trusted through the transport's cafile. */
final class TlsTest extends IdemTestCase
{
    private static string $dir;

    public static function setUpBeforeClass(): void
    {
        if (!extension_loaded('openssl')) {
            self::markTestSkipped('SKIPPED: PHP has no openssl extension: https:// cannot be tested');
        }
        self::$dir = sys_get_temp_dir() . '/idem-php-tls-' . bin2hex(random_bytes(4));
        mkdir(self::$dir);
        // A self-signed certificate for 127.0.0.1 (an IP subjectAltName), made by PHP's openssl.
        $key = openssl_pkey_new(['private_key_type' => OPENSSL_KEYTYPE_EC, 'curve_name' => 'prime256v1']);
        $config = self::$dir . '/openssl.cnf';
        file_put_contents($config, "[req]\ndistinguished_name = dn\n[dn]\n[san]\nsubjectAltName = IP:127.0.0.1\nbasicConstraints = critical,CA:FALSE\nkeyUsage = digitalSignature\nextendedKeyUsage = serverAuth\n");
        $options = ['config' => $config, 'digest_alg' => 'sha256', 'x509_extensions' => 'san'];
        $csr = openssl_csr_new(['commonName' => '127.0.0.1'], $key, $options);
        $cert = openssl_csr_sign($csr, null, $key, 2, $options, random_int(1, PHP_INT_MAX));
        openssl_x509_export_to_file($cert, self::$dir . '/cert.pem');
        openssl_pkey_export_to_file($key, self::$dir . '/key.pem', null, ['config' => $config]);
    }

    public static function tearDownAfterClass(): void
    {
        IdemServer::removeTree(self::$dir);
    }

    private static function tls(): IdemServer
    {
        return self::server(sprintf("[tls]\ncert = %s\nkey = %s\n", json_encode(self::$dir . '/cert.pem', JSON_UNESCAPED_SLASHES), json_encode(self::$dir . '/key.pem', JSON_UNESCAPED_SLASHES)));
    }

    public function testClaimsOverHttpsWithTheServersCertificateTrusted(): void
    {
        $url = self::tls()->url;
        self::assertStringStartsWith('https://', $url);
        $idem = new Client($url, transport: new StreamTransport(ssl: ['cafile' => self::$dir . '/cert.pem']));
        $ns = self::ns();
        self::assertTrue($idem->claims->claim($ns, key: 'over-tls')->claimed);
        self::assertNotNull($idem->claims->get($ns, key: 'over-tls'));
    }

    public function testAnUntrustedCertificateIsRefused(): void
    {
        $idem = new Client(self::tls()->url, retries: 0);
        try {
            $idem->claims->claim(self::ns(), key: 'k');
            self::fail('an untrusted certificate was accepted');
        } catch (ConnectionException $e) {
            self::assertStringContainsString('certificate verify failed', $e->detail);
        }
    }
}
