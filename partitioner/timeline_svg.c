/* partitioner/timeline_svg.c - the schedule as an SVG picture (see timeline_svg.h). */
#include "partitioner/timeline_svg.h"

#include <math.h>
#include <string.h>

#include "engine/core/status.h"

#define LEFT 90.0      /* px before time 0 (row labels) */
#define RIGHT 30.0
#define TOP 56.0       /* title and legend */
#define ROW 34.0       /* px per rank */
#define GAP 6.0        /* px between rows */
#define WIDTH 1400.0   /* px of the whole picture */
#define AXIS 50.0      /* px below the rows */

static void escaped(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

/* Fill colour of a compute op: blue forwards, green backwards, darker for later chunks. */
static void colour(int kind, int chunk, int v, char *buf, size_t cap)
{
    double shade = v > 1 ? 1.0 - 0.45 * chunk / (v - 1) : 1.0;
    int r, g, b;
    if (kind == TRI_SCHED_FWD) {
        r = 90; g = 150; b = 230;
    } else if (kind == TRI_SCHED_BWD_WEIGHT) {
        r = 150; g = 215; b = 120;
    } else {
        r = 60; g = 170; b = 90;
    }
    snprintf(buf, cap, "rgb(%d,%d,%d)", (int)(r * shade), (int)(g * shade), (int)(b * shade));
}

/* A round step for about 8 ticks over span seconds. */
static double tick_step(double span)
{
    double raw = span / 8.0, p = pow(10.0, floor(log10(raw)));
    double m = raw / p;
    return (m < 2 ? 2 : m < 5 ? 5 : 10) * p;
}

static void legend(FILE *f, int v, int split)
{
    const char *names[] = {"forward", split ? "backward (input)" : "backward", "backward (weight)"};
    int kinds[] = {TRI_SCHED_FWD, TRI_SCHED_BWD, TRI_SCHED_BWD_WEIGHT};
    double x = LEFT;
    for (int i = 0; i < (split ? 3 : 2); i++) {
        char c[32];
        colour(kinds[i], 0, v, c, sizeof c);
        fprintf(f, "<rect x=\"%.1f\" y=\"34\" width=\"14\" height=\"12\" fill=\"%s\" stroke=\"#333\" "
                "stroke-width=\"0.5\"/>\n<text x=\"%.1f\" y=\"45\" font-size=\"12\">%s</text>\n", x, c, x + 18,
                names[i]);
        x += 30 + 7.0 * (double)strlen(names[i]);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"34\" width=\"14\" height=\"12\" fill=\"white\" stroke=\"#333\" "
            "stroke-width=\"0.5\"/>\n<text x=\"%.1f\" y=\"45\" font-size=\"12\">idle (bubble)%s</text>\n", x,
            x + 18, v > 1 ? "; darker = later model chunk; numbers = micro-batch" : "; numbers = micro-batch");
}

int tri_timeline_svg(FILE *f, const tri_schedule *s, const tri_sim_result *sim, const char *title)
{
    if (!sim->start || !sim->end || sim->pp != s->pp || sim->makespan <= 0)
        return TRI_ERR(TRI_EINVAL, "timeline: no simulated times for schedule %s", s->name);
    double span = sim->makespan, plot = WIDTH - LEFT - RIGHT, xs = plot / span;
    double height = TOP + s->pp * (ROW + GAP) + AXIS;
    int split = 0;
    for (int r = 0; r < s->pp; r++)
        for (int i = 0; i < s->n_ops[r]; i++)
            split |= s->ops[r][i].kind == TRI_SCHED_BWD_INPUT;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n"
            "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n"
            "<text x=\"%.1f\" y=\"22\" font-size=\"15\" font-weight=\"bold\">", WIDTH, height, WIDTH, height,
            WIDTH, height, LEFT);
    escaped(f, title);
    fprintf(f, "</text>\n");
    legend(f, s->v, split);
    for (int r = 0; r < s->pp; r++) {
        double y = TOP + r * (ROW + GAP);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"end\">stage %d</text>\n", LEFT - 8,
                y + ROW / 2 + 4, r);
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"white\" stroke=\"#999\" "
                "stroke-width=\"0.5\"/>\n", LEFT, y, plot, ROW);
        for (int i = 0; i < s->n_ops[r]; i++) {
            const tri_sched_op *op = &s->ops[r][i];
            if (tri_sched_is_comm(op->kind) || sim->start[r][i] < 0)
                continue;
            double x0 = LEFT + sim->start[r][i] * xs, w = (sim->end[r][i] - sim->start[r][i]) * xs;
            char c[32];
            colour(op->kind, op->chunk, s->v, c, sizeof c);
            fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" stroke=\"#333\" "
                    "stroke-width=\"%.2f\"/>\n", x0, y + 1, w > 0.2 ? w : 0.2, ROW - 2, c, w > 6 ? 0.5 : 0.0);
            int digits = op->mb >= 100 ? 3 : op->mb >= 10 ? 2 : 1;
            if (w >= 7.0 * digits + 2)
                fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\" fill=\"white\">"
                        "%d</text>\n", x0 + w / 2, y + ROW / 2 + 4, op->mb);
        }
    }
    double axis_y = TOP + s->pp * (ROW + GAP) + 4, step = tick_step(span);
    const char *unit = span < 1e-3 ? "us" : span < 1.0 ? "ms" : "s";
    double mult = span < 1e-3 ? 1e6 : span < 1.0 ? 1e3 : 1.0;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", LEFT, axis_y,
            LEFT + plot, axis_y);
    for (double t = 0.0; t <= span * (1 + 1e-9); t += step) {
        double x = LEFT + t * xs;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n"
                "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%g %s</text>\n", x, axis_y, x,
                axis_y + 5, x, axis_y + 18, t * mult, unit);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">simulated bubble %.1f%% of %d ranks x %.4g %s</text>\n",
            LEFT, axis_y + 34, 100.0 * sim->bubble, s->pp, span * mult, unit);
    fprintf(f, "</svg>\n");
    return ferror(f) ? TRI_ERR(TRI_EIO, "timeline: write failed") : TRI_OK;
}
