/* units.h: the ONE place the C runtime defines flashml's units (DESIGN.md "Units and
 * definitions"). They must equal flashml/config.py; tests/runtime/test_runtime.py checks it through
 * `flashrt units --json`. */
#ifndef FLASHRT_UNITS_H
#define FLASHRT_UNITS_H

#define FRT_SEGMENT_BYTES 131072u          /* 128 KiB */
#define FRT_BLOCK_BYTES 8388608u           /* 8 MiB */
#define FRT_SEGMENTS_PER_BLOCK 64u         /* FRT_BLOCK_BYTES / FRT_SEGMENT_BYTES */
#define FRT_T_SEEK_S 11.5e-3               /* seconds per backend IO */
#define FRT_BANDWIDTH_BYTES_PER_S (143.0 * 1048576.0) /* 143 MiB/s */
#define FRT_MB 1000000.0                   /* rates: MB = 10^6 bytes */
#define FRT_GB 1073741824.0                /* cache sizes: GB = 2^30 bytes */
#define FRT_DISKS 36u
#define FRT_WINDOW_S 600.0
#define FRT_WARMUP_S 86400.0
#define FRT_SAMPLE_RATIO 100.0             /* percent of a full node in the trace */
#define FRT_CACHE_GB 366.475
#define FRT_ARTIFACT_TARGET_MIBPS 35.599    /* the Baleen artifact's target, MiB/s */
#define FRT_MIB 1048576.0
#define FRT_TARGET_WRITE_RATE_MBPS (FRT_ARTIFACT_TARGET_MIBPS * FRT_MIB / FRT_MB) /* 37.328 */
#define FRT_ALIGN 4096u                    /* buffer and offset alignment for O_DIRECT */

#if FRT_SEGMENTS_PER_BLOCK * FRT_SEGMENT_BYTES != FRT_BLOCK_BYTES
#error "segments per block does not match block and segment sizes"
#endif

#endif
