<?php

declare(strict_types=1);

namespace Idem;

/**
 * 422 urn:idem:problem:fingerprint-mismatch: the key was used before with another request.
 */
class MismatchException extends IdemException
{
}
