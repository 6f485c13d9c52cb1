<?php

declare(strict_types=1);

namespace Idem;

/**
 * 401 urn:idem:problem:unauthorized: no token, or one idem does not know (see the token: argument of
 * Client). For event intake with verify_secret, a missing or bad signature.
 */
class UnauthorizedException extends IdemException
{
}
