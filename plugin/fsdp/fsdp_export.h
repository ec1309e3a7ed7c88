#pragma once
// The fsdp plugin builds with -fvisibility=hidden. No other plugin links it (the veomni engine is built into it); the
// classes marked ENGINERY_FSDP_API are exported only because the tests (tests/fsdp, tests/veomni) link
// the library directly and construct, derive from or call them.
#define ENGINERY_FSDP_API __attribute__((visibility("default")))
