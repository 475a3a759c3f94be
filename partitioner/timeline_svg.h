/* partitioner/timeline_svg.h - the simulated schedule drawn as an SVG picture.
 *
 * One row per pipeline rank, time to the right; a box per compute op from the simulator's start and
 * end times (partitioner/simulate.h): forwards blue, backwards green (input / weight halves of a
 * split backward in two greens), darker for later model chunks when interleaved, each labelled
 * with its micro-batch when the box is wide enough. What stays white in a row is that rank's
 * bubble. A time axis in seconds and a legend; SVG 1.1 text, no external library (W3C SVG 1.1,
 * rect / text / line elements only). */
#ifndef TRIDENT_PARTITIONER_TIMELINE_SVG_H
#define TRIDENT_PARTITIONER_TIMELINE_SVG_H

#include <stdio.h>

#include "engine/train/schedule.h"
#include "partitioner/simulate.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the picture of schedule s as simulated in sim (times in seconds) to f, with `title` (plain
 * text; XML special characters are escaped) above it. TRI_EINVAL when sim holds no times for s,
 * TRI_EIO when writing fails. */
int tri_timeline_svg(FILE *f, const tri_schedule *s, const tri_sim_result *sim, const char *title);

#ifdef __cplusplus
}
#endif

#endif
