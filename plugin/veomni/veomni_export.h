#pragma once
// The veomni plugin builds with -fvisibility=hidden; what tests (and a further subclass) use is marked here.
#define ENGINERY_VEOMNI_API __attribute__((visibility("default")))
