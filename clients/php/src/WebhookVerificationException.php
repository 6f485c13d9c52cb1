<?php

declare(strict_types=1);

namespace Idem;

/**
 * verifyWebhook() refused a request: a missing header, no matching signature, a timestamp more
 * than the tolerance (5 minutes) away, or a body that is not JSON. Answer it with 401 and run
 * nothing. (A secret that is not whsec_ + base64 is a configuration mistake and throws
 * \InvalidArgumentException instead.)
 */
class WebhookVerificationException extends \RuntimeException
{
}
