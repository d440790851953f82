/* map.c: the u64 -> u32 hash map of map.h (map_tmpl.h instantiated). */
#include "util/map.h"

#define MAP_NAME frt_map
#define MAP_VAL uint32_t
#define MAP_SCOPE
#include "util/map_tmpl.h"
