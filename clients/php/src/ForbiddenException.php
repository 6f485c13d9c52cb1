<?php

declare(strict_types=1);

namespace Idem;

/**
 * 403 urn:idem:problem:forbidden: the token is known but may not do this (its can, namespaces or
 * sources); detail says what was refused. Nothing was changed; retrying will not help.
 */
class ForbiddenException extends IdemException
{
}
