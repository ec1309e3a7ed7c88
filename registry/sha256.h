#pragma once
// The SHA-256 implementation moved to host_api (the checkpoint code uses it too); kept so existing includes work.
#include "host_api/sha256.h"
