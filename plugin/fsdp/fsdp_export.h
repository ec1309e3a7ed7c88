#pragma once
// The fsdp plugin builds with -fvisibility=hidden; classes a subclass in another library (the veomni plugin)
// derives from or calls are marked with ENGINERY_FSDP_API so their symbols and typeinfo stay visible.
#define ENGINERY_FSDP_API __attribute__((visibility("default")))
