/* map.c: the hash maps of map.h, u64 -> u32 and u64 -> u64 (map_tmpl.h instantiated). */
#include "util/map.h"

#define MAP_NAME frt_map
#define MAP_VAL uint32_t
#define MAP_SCOPE
#include "util/map_tmpl.h"

#undef MAP_NAME
#undef MAP_VAL
#define MAP_NAME frt_map64
#define MAP_VAL uint64_t
#include "util/map_tmpl.h"
