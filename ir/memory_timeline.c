/* memory_timeline.c — device bytes over the schedule as an SVG picture
 * (ir.h, "memory timeline"): diffc --memory-timeline and diffrun
 * --memory-timeline write it.
 *
 * Contract: one panel per device, all on the same axes (x: the step index,
 * y: bytes).  Each panel stacks the kinds of dc_mem_series (resident weights
 * at the bottom, then held, in flight, activations), draws the arena's
 * high-water mark over the resident weights as a dashed line, marks the
 * step where the stack is highest (a dot and a label naming the step's op
 * and module path), and, under the plot, one tick per upload at its step
 * with a bar to its first reader (the prefetch distance).  A measured series
 * (same steps) is drawn over the prediction as a line.  Under the panels
 * the pipeline's phases and the top-level modules run along the x axis.
 *
 * Many steps share a pixel column: a column shows the one step of its range
 * whose total is highest, broken down by kind, so the peak is never lost and
 * the stack is always a state memory was really in (stacking each kind's own
 * maximum would draw totals that never occurred).  The file is text from
 * the module alone (no clock, no addresses): the same module gives the same
 * bytes. */
#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir.h"

enum {
  WIDTH = 1200,
  MARGIN_L = 84,
  MARGIN_R = 28,
  PLOT_W = WIDTH - MARGIN_L - MARGIN_R,
  PLOT_H_ONE = 320, /* one device */
  PLOT_H_MANY = 220,
  LANE_H = 6,
  MAX_LANES = 6,
  BAND_H = 20,
  UPLOAD_TITLES_MAX = 1000, /* above this many uploads a panel drops their tooltips: the file stays small */
};

/* Muted colours per kind, in dc_mem_kind order. */
static const char *const kind_fill[DC_MEM_KINDS] = {"#8fa3c2", "#e0a46e", "#9cc59a", "#c596b4"};
static const char *const kind_label[DC_MEM_KINDS] = {"resident weights", "uploaded weights (in flight)",
                                                     "held through the loop", "activations"};
/* Stacking order, bottom to top. */
static const dc_mem_kind stack_order[DC_MEM_KINDS] = {DC_MEM_WEIGHTS, DC_MEM_HELD, DC_MEM_IN_FLIGHT, DC_MEM_ACTIVATIONS};

/* ---- text ---------------------------------------------------------------- */

static void put_escaped(dc_buf *b, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
      case '&': dc_buf_printf(b, "&amp;"); break;
      case '<': dc_buf_printf(b, "&lt;"); break;
      case '>': dc_buf_printf(b, "&gt;"); break;
      case '"': dc_buf_printf(b, "&quot;"); break;
      case '\'': dc_buf_printf(b, "&apos;"); break;
      default:
        /* control characters are not XML; a label never needs them */
        dc_buf_u8(b, (unsigned char)*s < 0x20 ? ' ' : (uint8_t)*s);
    }
  }
}

/* Rough width of a label in the sans-serif font at size px (no font
 * metrics here): used only to skip labels that would overlap. */
static double text_width(const char *s, double px) { return (double)strlen(s) * px * 0.58; }

static void text(dc_buf *b, double x, double y, const char *cls, const char *anchor, const char *s) {
  dc_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" class=\"%s\"%s%s%s>", x, y, cls, anchor ? " text-anchor=\"" : "",
                anchor ? anchor : "", anchor ? "\"" : "");
  put_escaped(b, s);
  dc_buf_printf(b, "</text>\n");
}

static void title(dc_buf *b, const char *s) {
  dc_buf_printf(b, "<title>");
  put_escaped(b, s);
  dc_buf_printf(b, "</title>");
}

/* Labels are formatted on the stack (no allocation that could fail
 * quietly); module paths are far shorter than this. */
#define LABEL_MAX 512
static const char *label_f(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *label_f(char *buf, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, LABEL_MAX, fmt, ap);
  va_end(ap);
  return buf;
}

static const char *fmt_bytes(uint64_t v, char *buf) { return dc_format_bytes(v, buf, 32); }

/* ---- the drawing's geometry --------------------------------------------- */

typedef struct {
  const dc_module *m;
  const dc_mem_series *pred, *meas;
  int32_t n;             /* steps */
  int32_t bins;          /* pixel columns used: min(n, PLOT_W) */
  int32_t *first;        /* [bins + 1]: bin b covers steps [first[b], first[b+1]) */
  int32_t *rep;          /* [bins]: the step of the bin whose predicted total is highest (per device, reused) */
  double ytop;           /* bytes at the top of every plot */
  double tick;           /* bytes between y gridlines */
  uint64_t unit;         /* 1, 1024, ... for tick labels */
  const char *unit_name;
  dc_buf *out;
} timeline;

static double x_of_step(const timeline *t, double s) { return MARGIN_L + s * PLOT_W / (double)t->n; }
static double y_of(const timeline *t, double top, double h, double bytes) { return top + h - bytes / t->ytop * h; }

static uint64_t total_at(const dc_mem_series *s, int32_t step, int d) {
  uint64_t v = 0;
  for (int k = 0; k < DC_MEM_KINDS; k++) v += dc_mem_series_at(s, step, d, (dc_mem_kind)k);
  return v;
}

static uint64_t arena_at(const dc_mem_series *s, int32_t step, int d) {
  return s->arena_top[(size_t)d * (size_t)s->nsteps + (size_t)step];
}

/* Nice y scale: a unit (B, KiB, MiB, ...) and a tick of 1, 2, 2.5 or 5 x
 * 10^j of it, with room above the highest value for the peak's label. */
static void choose_scale(timeline *t, uint64_t ymax) {
  static const char *const names[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double want = ymax ? (double)ymax * 1.12 : 1024.0;
  int u = 0;
  t->unit = 1;
  while (u < 4 && want / (double)t->unit >= 1024.0) t->unit *= 1024, u++;
  t->unit_name = names[u];
  double in_units = want / (double)t->unit, raw = in_units / 5.0;
  double mag = pow(10.0, floor(log10(raw)));
  static const double steps[] = {1, 2, 2.5, 5, 10};
  double step = 10 * mag;
  for (int i = 0; i < 5; i++)
    if (steps[i] * mag >= raw) {
      step = steps[i] * mag;
      break;
    }
  if (u == 0 && step < 1) step = 1; /* whole bytes */
  t->tick = step * (double)t->unit;
  t->ytop = ceil(in_units / step) * step * (double)t->unit;
}

/* The step of [first, end) whose total on device d is highest (the first
 * such). */
static int32_t highest_step(const dc_mem_series *s, int d, int32_t first, int32_t end) {
  int32_t best = first;
  uint64_t v = total_at(s, first, d);
  for (int32_t i = first + 1; i < end; i++) {
    uint64_t w = total_at(s, i, d);
    if (w > v) v = w, best = i;
  }
  return best;
}

/* ---- module and phase labels -------------------------------------------- */

/* The top-level module of a scope: its first two path elements (three in
 * a pipeline, whose scopes start with the component: "unet.down_blocks.1"),
 * and the index after them when they end in a list ("mid_block.attentions"
 * -> "mid_block.attentions.0").  dc_malloc'd; NULL on OOM. */
static char *top_module(const dc_module *m, const char *scope) {
  int want = m->nphases ? 3 : 2;
  const char *end = scope;
  for (int k = 0; k < want && *end; k++) {
    end += strcspn(end, "."); /* the end of element k */
    if (k + 1 < want && *end) end++;
  }
  int numbered = end > scope && end[-1] >= '0' && end[-1] <= '9';
  if (*end == '.' && end[1] >= '0' && end[1] <= '9' && !numbered) {
    end++;
    while (*end >= '0' && *end <= '9') end++;
  }
  return dc_strndup(scope, (size_t)(end - scope));
}

/* ---- pieces of the picture ---------------------------------------------- */

/* A step line over the bins: value(b) in bytes, drawn with horizontal runs. */
typedef double (*bin_value)(const timeline *t, int d, int32_t b);

static void step_path(timeline *t, int d, double top, double h, bin_value f) {
  dc_buf *b = t->out;
  double prev = NAN;
  for (int32_t k = 0; k < t->bins; k++) {
    double x0 = x_of_step(t, t->first[k]), y = y_of(t, top, h, f(t, d, k));
    if (k == 0) dc_buf_printf(b, "M%.1f %.1f", x0, y);
    else if (y != prev) dc_buf_printf(b, "H%.1fV%.1f", x0, y);
    prev = y;
  }
  dc_buf_printf(b, "H%.1f", x_of_step(t, t->n));
}

static double pred_arena(const timeline *t, int d, int32_t k) {
  int32_t last = t->first[k + 1] - 1; /* the mark never falls: its value at a bin's last step is the bin's highest */
  return (double)(dc_mem_series_at(t->pred, last, d, DC_MEM_WEIGHTS) + arena_at(t->pred, last, d));
}
static double meas_total(const timeline *t, int d, int32_t k) {
  uint64_t v = 0;
  for (int32_t s = t->first[k]; s < t->first[k + 1]; s++) {
    uint64_t w = total_at(t->meas, s, d);
    if (w > v) v = w;
  }
  return (double)v;
}
static double meas_arena(const timeline *t, int d, int32_t k) {
  uint64_t v = 0;
  for (int32_t s = t->first[k]; s < t->first[k + 1]; s++) {
    uint64_t w = dc_mem_series_at(t->meas, s, d, DC_MEM_WEIGHTS) + arena_at(t->meas, s, d);
    if (w > v) v = w;
  }
  return (double)v;
}

/* The bytes below (and including) stacking level `level` at the bin's
 * representative step. */
static double stacked(const timeline *t, int d, int32_t k, int level) {
  uint64_t v = 0;
  for (int j = 0; j <= level; j++) v += dc_mem_series_at(t->pred, t->rep[k], d, stack_order[j]);
  return (double)v;
}

static void area(timeline *t, int d, double top, double h, int level, uint64_t most) {
  dc_buf *b = t->out;
  char b1[32];
  dc_mem_kind k = stack_order[level];
  dc_buf_printf(b, "<path class=\"area\" fill=\"%s\" d=\"", kind_fill[k]);
  double prev = NAN;
  for (int32_t c = 0; c < t->bins; c++) { /* the top edge, left to right */
    double x0 = x_of_step(t, t->first[c]), y = y_of(t, top, h, stacked(t, d, c, level));
    if (c == 0) dc_buf_printf(b, "M%.1f %.1f", x0, y);
    else if (y != prev) dc_buf_printf(b, "H%.1fV%.1f", x0, y);
    prev = y;
  }
  dc_buf_printf(b, "H%.1f", x_of_step(t, t->n));
  for (int32_t c = t->bins - 1; c >= 0; c--) { /* the bottom edge, right to left */
    double x1 = x_of_step(t, t->first[c + 1]), y = level ? y_of(t, top, h, stacked(t, d, c, level - 1)) : top + h;
    if (c == t->bins - 1) dc_buf_printf(b, "V%.1f", y);
    else if (y != prev) dc_buf_printf(b, "H%.1fV%.1f", x1, y);
    prev = y;
  }
  dc_buf_printf(b, "H%.1fZ\">", x_of_step(t, 0));
  char tip[LABEL_MAX];
  title(b, label_f(tip, "%s: at most %s", kind_label[k], fmt_bytes(most, b1)));
  dc_buf_printf(b, "</path>\n");
}

static void y_axis(timeline *t, double top, double h) {
  dc_buf *b = t->out;
  for (double v = 0; v <= t->ytop * (1 + 1e-9); v += t->tick) {
    double y = y_of(t, top, h, v);
    dc_buf_printf(b, "<line class=\"grid\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>\n", MARGIN_L, y,
                  MARGIN_L + PLOT_W, y);
    char label[48];
    snprintf(label, sizeof label, "%g %s", v / (double)t->unit, v == 0 ? "" : t->unit_name);
    text(b, MARGIN_L - 8, y + 4, "tick", "end", v == 0 ? "0" : label);
  }
}

static void x_axis(timeline *t, double top, double h) {
  dc_buf *b = t->out;
  double raw = t->n / 10.0, mag = pow(10.0, floor(log10(raw > 1 ? raw : 1)));
  double step = mag;
  static const double nice[] = {1, 2, 5, 10};
  for (int i = 0; i < 4; i++)
    if (nice[i] * mag >= raw) {
      step = nice[i] * mag;
      break;
    }
  for (double s = 0; s <= t->n; s += step) {
    double x = x_of_step(t, s);
    dc_buf_printf(b, "<line class=\"vgrid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", x, top, x, top + h);
    char label[32];
    snprintf(label, sizeof label, "%.0f", s);
    text(b, x, top + h + 14, "tick", "middle", label);
  }
}

/* Dashed lines at the phases' first steps, their names along the top. */
static void phase_lines(timeline *t, double top, double h) {
  const dc_module *m = t->m;
  if (!m->nphases) return;
  int32_t first[DC_MAX_PHASES], end[DC_MAX_PHASES];
  dc_phase_spans(m, first, end);
  double free_x = 0;
  for (int p = 0; p < m->nphases; p++) {
    if (first[p] == end[p]) continue;
    double x = x_of_step(t, first[p]);
    if (p) dc_buf_printf(t->out, "<line class=\"phase\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", x, top, x, top + h);
    if (x + 3 >= free_x) {
      text(t->out, x + 3, top + 11, "phase-name", NULL, m->phases[p].name);
      free_x = x + 3 + text_width(m->phases[p].name, 10) + 6;
    }
  }
}

/* The peak of device d: a dot on the stack's top and a label naming the
 * step's op and module path and the total. */
static void peak_marker(timeline *t, int d, double top, double h, int32_t peak) {
  dc_buf *b = t->out;
  const dc_node *n = &t->m->nodes[peak];
  char b1[32];
  uint64_t total = total_at(t->pred, peak, d);
  double x = (x_of_step(t, peak) + x_of_step(t, peak + 1)) / 2, y = y_of(t, top, h, (double)total);
  const char *scope = n->scope && *n->scope ? n->scope : "(no module path)";
  char label[LABEL_MAX];
  label_f(label, "peak %s live at step %d: %s %s", fmt_bytes(total, b1), peak, dc_op_get(n->op)->name, scope);
  int right = x > MARGIN_L + PLOT_W * 0.5;
  dc_buf_printf(b, "<g class=\"peak\" data-step=\"%d\" data-bytes=\"%llu\">", peak, (unsigned long long)total);
  title(b, label);
  dc_buf_printf(b, "<line class=\"peak-guide\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>", x, y, x, top + h);
  dc_buf_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\"/>\n", x, y);
  text(b, right ? x - 8 : x + 8, y - 8, "peak-label", right ? "end" : NULL, label);
  dc_buf_printf(b, "</g>\n");
}

/* Invisible columns whose tooltips say what the plot shows there: the
 * step, its op and module path, and its bytes by kind (the kinds drawn).
 * A column per bin on one device; with more devices a column spans as
 * many bins as there are devices, so the file does not grow with them. */
static void hover_columns(timeline *t, int d, double top, double h, const int *drawn) {
  dc_buf *b = t->out;
  int32_t span = t->pred->ndevices;
  dc_buf_printf(b, "<g class=\"hover\">\n");
  for (int32_t c = 0; c < t->bins; c += span) {
    int32_t end = c + span < t->bins ? c + span : t->bins;
    int32_t s = highest_step(t->pred, d, t->first[c], t->first[end]);
    const dc_node *n = &t->m->nodes[s];
    char tip[LABEL_MAX], b1[32];
    size_t len = 0;
    if (t->first[end] - t->first[c] > 1)
      len += (size_t)snprintf(tip, sizeof tip, "steps %d-%d, highest at ", t->first[c], t->first[end] - 1);
    len += (size_t)snprintf(tip + len, sizeof tip - len, "step %d: %s %s \xe2\x80\x94 %s", s, dc_op_get(n->op)->name,
                            n->scope && *n->scope ? n->scope : "", fmt_bytes(total_at(t->pred, s, d), b1));
    static const char *const short_name[DC_MEM_KINDS] = {"weights", "in flight", "held", "activations"};
    for (int level = 0; level < DC_MEM_KINDS && len < sizeof tip; level++) {
      dc_mem_kind k = stack_order[level];
      if (drawn[k])
        len += (size_t)snprintf(tip + len, sizeof tip - len, "%s%s %s", level ? ", " : " (", short_name[k],
                                fmt_bytes(dc_mem_series_at(t->pred, s, d, k), b1));
    }
    if (len < sizeof tip) snprintf(tip + len, sizeof tip - len, ")");
    double x0 = x_of_step(t, t->first[c]), x1 = x_of_step(t, t->first[end]);
    dc_buf_printf(b, "<rect x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"%.0f\">", x0, top, x1 - x0, h);
    title(b, tip);
    dc_buf_printf(b, "</rect>\n");
  }
  dc_buf_printf(b, "</g>\n");
}

/* One legend row: each kind drawn on device d with its bytes at the peak,
 * then the lines. */
static void legend(timeline *t, int d, double y, int32_t peak, const int *drawn) {
  dc_buf *b = t->out;
  double x = MARGIN_L;
  char b1[32], item[96];
  for (int level = 0; level < DC_MEM_KINDS; level++) {
    dc_mem_kind k = stack_order[level];
    if (!drawn[k]) continue;
    uint64_t v = dc_mem_series_at(t->pred, peak, d, k);
    snprintf(item, sizeof item, "%s %s", kind_label[k], fmt_bytes(v, b1));
    dc_buf_printf(b, "<g class=\"legend\" data-kind=\"%s\" data-bytes=\"%llu\">", dc_mem_kind_name(k), (unsigned long long)v);
    dc_buf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" rx=\"2\" fill=\"%s\"/>", x, y - 10, kind_fill[k]);
    text(b, x + 17, y, "legend-text", NULL, item);
    dc_buf_printf(b, "</g>\n");
    x += 17 + text_width(item, 12) + 18;
  }
  dc_buf_printf(b, "<line class=\"arena\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>", x, y - 4, x + 18, y - 4);
  text(b, x + 23, y, "legend-text", NULL, "arena high-water + weights");
  x += 23 + text_width("arena high-water + weights", 12) + 18;
  if (t->meas) {
    dc_buf_printf(b, "<line class=\"measured\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>", x, y - 4, x + 18, y - 4);
    text(b, x + 23, y, "legend-text", NULL, "measured");
  }
}

typedef struct {
  int32_t step, reader;
} upload_span;

static int count_uploads(const dc_module *m, int d) {
  int n = 0;
  for (int32_t i = 0; i < m->nnodes; i++) n += m->nodes[i].op == OP_UPLOAD && m->nodes[i].device == d;
  return n;
}

/* Under the plot: a tick at each upload's step and a bar to its first
 * reader, each offload group in a lane of its own (round robin). */
static double upload_band(timeline *t, int d, double top) {
  const dc_module *m = t->m;
  dc_buf *b = t->out;
  int nup = count_uploads(m, d);
  if (!nup) return top;
  /* a lane per offload group, round robin: a group's uploads share one,
   * so its bars show together how far ahead the group is fetched */
  int64_t groups = 1;
  for (int32_t i = 0; i < m->nnodes; i++)
    if (m->nodes[i].op == OP_UPLOAD && m->nodes[i].device == d && dc_node_int(&m->nodes[i], "group") + 1 > groups)
      groups = dc_node_int(&m->nodes[i], "group") + 1;
  int lanes = groups < MAX_LANES ? (int)groups : MAX_LANES;
  char b1[32];
  text(b, MARGIN_L - 8, top + 9, "band-label", "end", "uploads");
  dc_buf_printf(b, "<g class=\"uploads\" data-count=\"%d\">\n", nup);
  /* readers are found per upload: precompute them once in a pass from the back */
  int32_t *reader = dc_calloc((size_t)m->nnodes, sizeof *reader);
  if (!reader) {
    b->failed = 1;
    return top;
  }
  for (int32_t i = 0; i < m->nnodes; i++) reader[i] = -1;
  for (int32_t i = m->nnodes - 1; i >= 0; i--)
    for (int k = 0; k < m->nodes[i].ninputs; k++) reader[m->nodes[i].inputs[k]] = i;
  for (int32_t i = 0; i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    if (n->op != OP_UPLOAD || n->device != d) continue;
    int32_t r = reader[i] >= 0 ? reader[i] : i;
    double x0 = x_of_step(t, i + 0.5), x1 = x_of_step(t, r + 0.5);
    int lane = (int)(dc_node_int(n, "group") % lanes);
    double y = top + lane * LANE_H;
    dc_buf_printf(b, "<path class=\"upload\" d=\"M%.1f %.1fv%dM%.1f %.1fH%.1f\">", x0, y, LANE_H - 1, x0, y + (LANE_H - 1) / 2.0,
                  x1 > x0 ? x1 : x0);
    if (nup <= UPLOAD_TITLES_MAX) {
      const dc_node *src = n->ninputs ? &m->nodes[n->inputs[0]] : NULL;
      const char *what = src && src->op == OP_WEIGHT ? m->weights[src->ref].name : n->scope ? n->scope : "?";
      char tip[LABEL_MAX];
      title(b, label_f(tip, "upload %%%d %s (%s) at step %d, first read at step %d: %d step(s) ahead", i, what,
                       fmt_bytes(dc_type_bytes(&n->type), b1), i, r, r - i));
    }
    dc_buf_printf(b, "</path>\n");
  }
  dc_free(reader);
  dc_buf_printf(b, "</g>\n");
  if (nup > UPLOAD_TITLES_MAX) {
    char note[96];
    snprintf(note, sizeof note, "%d uploads (tooltips left out to keep the file small)", nup);
    text(b, MARGIN_L + PLOT_W, top + lanes * LANE_H + 11, "band-label", "end", note);
  }
  return top + lanes * LANE_H + 6;
}

/* A band of labelled runs along the x axis: runs[i] covers steps
 * [start[i], start[i+1]) and is called names[i]. */
static void run_band(timeline *t, double top, const char *label, int nruns, const int32_t *start, char *const *names,
                     const char *const *notes, const char *kind) {
  dc_buf *b = t->out;
  text(b, MARGIN_L - 8, top + 14, "band-label", "end", label);
  double free_x = 0;
  for (int r = 0; r < nruns; r++) {
    double x0 = x_of_step(t, start[r]), x1 = x_of_step(t, start[r + 1]);
    dc_buf_printf(b, "<g class=\"%s\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" class=\"run%d\"/>", kind, x0,
                  top, x1 - x0, BAND_H - 2, r & 1);
    char tip[LABEL_MAX];
    title(b, label_f(tip, "%s: steps %d to %d%s", names[r], start[r], start[r + 1] - 1, notes ? notes[r] : ""));
    /* the name, or in a pipeline without its component when only that fits */
    const char *shown = names[r], *dot = strchr(shown, '.');
    if (text_width(shown, 10) + 4 > x1 - x0 && t->m->nphases && dot && !strcmp(kind, "module")) shown = dot + 1;
    double w = text_width(shown, 10), mid = (x0 + x1) / 2;
    if (w + 4 <= x1 - x0 && mid - w / 2 >= free_x) {
      text(b, mid, top + 13, "run-label", "middle", shown);
      free_x = mid + w / 2 + 4;
    }
    dc_buf_printf(b, "</g>\n");
  }
}

/* Steps that do no work of a module: the graph's inputs, weights, and
 * uploads (which carry their reader's scope but run ahead of it, on the
 * copy stream). */
static int neutral_step(const dc_node *n) {
  return n->op == OP_INPUT || n->op == OP_WEIGHT || n->op == OP_UPLOAD || !n->scope || !*n->scope;
}

/* The top-level modules as runs of steps.  A phase boundary ends a run.
 * Neutral steps between two steps of one module stay in its run; a
 * stretch of them between two modules (or at a phase's start) joins the
 * run after it, unless it uploads: then it is a run of its own,
 * "(uploads)" (a group's prefetch, a phase that only uploads). */
static dc_status *module_band(timeline *t, double top) {
  const dc_module *m = t->m;
  int32_t *start = dc_calloc((size_t)m->nnodes + 2, sizeof *start);
  char **names = dc_calloc((size_t)m->nnodes + 2, sizeof *names);
  int nruns = 0, uploads = 0, open = 0; /* uploads: the neutral stretch since stretch_from holds one */
  int32_t stretch_from = 0;
  dc_status *st = NULL;
  if (!start || !names) st = dc_nomem("drawing the memory timeline");
  for (int32_t i = 0; !st && i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    if (i > 0 && n->phase != m->nodes[i - 1].phase) open = 0, stretch_from = i, uploads = 0;
    if (neutral_step(n)) {
      uploads |= n->op == OP_UPLOAD;
      continue;
    }
    char *name = top_module(m, n->scope);
    if (!name) {
      st = dc_nomem("drawing the memory timeline");
      break;
    }
    if (open && !strcmp(names[nruns - 1], name)) {
      dc_free(name);
    } else {
      if (uploads && stretch_from < i) {
        names[nruns] = dc_strdup("(uploads)");
        start[nruns++] = stretch_from;
        if (!names[nruns - 1]) st = dc_nomem("drawing the memory timeline");
      }
      names[nruns] = name;
      start[nruns++] = uploads ? i : stretch_from;
      open = 1;
    }
    stretch_from = i + 1, uploads = 0;
  }
  if (!st && (stretch_from < m->nnodes && uploads)) { /* a trailing stretch of uploads */
    names[nruns] = dc_strdup("(uploads)");
    start[nruns++] = stretch_from;
    if (!names[nruns - 1]) st = dc_nomem("drawing the memory timeline");
  }
  if (!st && nruns) {
    start[0] = 0; /* steps before the first run (inputs) belong to it */
    start[nruns] = m->nnodes;
    run_band(t, top, "modules", nruns, start, names, NULL, "module");
  }
  for (int r = 0; names && r < nruns; r++) dc_free(names[r]);
  dc_free(names);
  dc_free(start);
  return st;
}

static void phase_band(timeline *t, double top) {
  const dc_module *m = t->m;
  int32_t first[DC_MAX_PHASES], end[DC_MAX_PHASES], start[DC_MAX_PHASES + 1];
  char *names[DC_MAX_PHASES];
  const char *notes[DC_MAX_PHASES];
  dc_phase_spans(m, first, end);
  int nruns = 0;
  for (int p = 0; p < m->nphases; p++) {
    if (first[p] == end[p]) continue;
    names[nruns] = (char *)m->phases[p].name;
    notes[nruns] = m->phases[p].loop ? " (a loop phase: it runs once per loop iteration, one run drawn)" : "";
    start[nruns++] = first[p];
  }
  start[nruns] = m->nnodes;
  run_band(t, top, "phases", nruns, start, names, notes, "phase-run");
}

/* ---- the whole picture --------------------------------------------------- */

static const char style[] =
    "<style>\n"
    "text{font-family:'DejaVu Sans','Helvetica Neue',Helvetica,Arial,sans-serif;fill:#333}\n"
    ".title{font-size:17px;font-weight:bold;fill:#222}.subtitle{font-size:12px;fill:#555}\n"
    ".tick{font-size:10px;fill:#666}.legend-text{font-size:12px}.panel-name{font-size:12px;font-weight:bold}\n"
    ".band-label{font-size:10px;fill:#666}.run-label{font-size:10px;fill:#444}.phase-name{font-size:10px;fill:#555}\n"
    ".axis-title{font-size:11px;fill:#555}.peak-label{font-size:11px;font-weight:bold;fill:#222;paint-order:stroke;stroke:#fff;stroke-width:3px}\n"
    ".grid{stroke:#e3e3e3;stroke-width:1}.vgrid{stroke:#efefef;stroke-width:1}\n"
    ".area{stroke:none}.arena{fill:none;stroke:#3b4a63;stroke-width:1.4;stroke-dasharray:5 3}\n"
    ".measured{fill:none;stroke:#b03a2e;stroke-width:1.6}.measured-arena{fill:none;stroke:#b03a2e;stroke-width:1;stroke-dasharray:2 2}\n"
    ".phase{stroke:#777;stroke-width:1;stroke-dasharray:3 3}.peak circle{fill:#222;stroke:#fff;stroke-width:1.5}\n"
    ".peak-guide{stroke:#222;stroke-width:0.8;stroke-dasharray:2 2}.frame{fill:none;stroke:#bbb}\n"
    ".hover rect{fill:#000;fill-opacity:0}.hover rect:hover{fill-opacity:0.06}\n"
    ".upload{fill:none;stroke:#b8793f;stroke-width:1.2}.run0{fill:#eceff4}.run1{fill:#dde2ea}\n"
    ".phase-run .run0{fill:#e8e4d8}.phase-run .run1{fill:#dcd6c4}\n"
    "</style>\n";

/* The options the title names: metadata keys the passes set. */
static void subtitle_lines(const timeline *t, char *line1, size_t cap) {
  static const char *const keys[] = {"entry", "pipeline", "offload", "storage", "layout", "device_map", "vae_tiling",
                                     "vae_slicing", "host_memory"};
  size_t len = 0;
  line1[0] = 0;
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
    const char *v = dc_module_get_meta(t->m, keys[k]);
    if (!v || !*v) continue;
    int w = snprintf(line1 + len, cap - len, "%s%s %s", len ? "  \xc2\xb7  " : "", keys[k], v);
    if (w < 0 || (size_t)w >= cap - len) { /* cut, marked with an ellipsis */
      if (cap > 4) memcpy(line1 + cap - 4, "...", 4);
      return;
    }
    len += (size_t)w;
  }
  snprintf(line1 + len, cap - len, "%s%d steps", len ? "  \xc2\xb7  " : "", t->n);
}

/* Bytes of kind k at the step of device d where they are highest. */
static uint64_t kind_most(const dc_mem_series *s, int d, dc_mem_kind k) {
  uint64_t v = 0;
  for (int32_t i = 0; i < s->nsteps; i++)
    if (dc_mem_series_at(s, i, d, k) > v) v = dc_mem_series_at(s, i, d, k);
  return v;
}

static double panel(timeline *t, int d, double top) {
  dc_buf *b = t->out;
  double h = t->pred->ndevices > 1 ? PLOT_H_MANY : PLOT_H_ONE;
  int drawn[DC_MEM_KINDS];
  uint64_t most[DC_MEM_KINDS];
  for (int k = 0; k < DC_MEM_KINDS; k++) drawn[k] = (most[k] = kind_most(t->pred, d, (dc_mem_kind)k)) > 0;
  int32_t peak = highest_step(t->pred, d, 0, t->n);
  char name[48];
  if (t->pred->ndevices > 1) {
    snprintf(name, sizeof name, "device %d", d);
    text(b, MARGIN_L, top + 2, "panel-name", NULL, name);
    top += 20;
  }
  legend(t, d, top + 4, peak, drawn);
  top += 18;
  dc_buf_printf(b, "<g class=\"panel\" data-device=\"%d\">\n", d);
  y_axis(t, top, h);
  x_axis(t, top, h);
  for (int32_t k = 0; k < t->bins; k++) t->rep[k] = highest_step(t->pred, d, t->first[k], t->first[k + 1]);
  for (int level = 0; level < DC_MEM_KINDS; level++)
    if (drawn[stack_order[level]]) area(t, d, top, h, level, most[stack_order[level]]);
  dc_buf_printf(b, "<path class=\"arena\" d=\"");
  step_path(t, d, top, h, pred_arena);
  dc_buf_printf(b, "\"><title>arena high-water mark over the resident weights</title></path>\n");
  if (t->meas) {
    dc_buf_printf(b, "<path class=\"measured-arena\" d=\"");
    step_path(t, d, top, h, meas_arena);
    dc_buf_printf(b, "\"><title>measured arena high-water mark over the resident weights</title></path>\n");
    dc_buf_printf(b, "<path class=\"measured\" d=\"");
    step_path(t, d, top, h, meas_total);
    dc_buf_printf(b, "\"><title>measured device bytes</title></path>\n");
  }
  phase_lines(t, top, h);
  dc_buf_printf(b, "<rect class=\"frame\" x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\"/>\n", MARGIN_L, top, PLOT_W, h);
  hover_columns(t, d, top, h, drawn);
  peak_marker(t, d, top, h, peak);
  dc_buf_printf(b, "</g>\n");
  return upload_band(t, d, top + h + 22) + 14;
}

static dc_status *check_series(const dc_module *m, const dc_mem_series *s, const char *which) {
  if (!s || !s->bytes || !s->arena_top)
    return dc_error(DC_ERR_ARGUMENT, "memory timeline: no %s series to draw", which);
  if (s->nsteps != m->nnodes)
    return dc_error(DC_ERR_MISMATCH, "memory timeline: the %s series has %d steps, the module %d", which, s->nsteps, m->nnodes);
  if (s->ndevices < 1 || s->ndevices > DC_MAX_DEVICES)
    return dc_error(DC_ERR_MISMATCH, "memory timeline: the %s series has %d devices (expected 1 to %d)", which, s->ndevices,
                    DC_MAX_DEVICES);
  return NULL;
}

/* The title, the options, and what each device holds. */
static void heading(timeline *t, const char *head) {
  const dc_mem_series *p = t->pred;
  char sub[400], line2[400], b1[32], b2[32], b3[32];
  subtitle_lines(t, sub, sizeof sub);
  text(t->out, MARGIN_L, 28, "title", NULL, head);
  text(t->out, MARGIN_L, 47, "subtitle", NULL, sub);
  size_t len = 0;
  line2[0] = 0;
  for (int d = 0; d < p->ndevices && len < sizeof line2; d++) {
    uint64_t w = dc_mem_series_at(p, 0, d, DC_MEM_WEIGHTS), arena = arena_at(p, t->n - 1, d);
    char dev[32] = "";
    if (p->ndevices > 1) snprintf(dev, sizeof dev, "%sdevice %d: ", d ? ";  " : "", d);
    int w2 = snprintf(line2 + len, sizeof line2 - len, "%sdevice memory %s = resident weights %s + arena %s (its high-water mark)",
                      dev, fmt_bytes(w + arena, b1), fmt_bytes(w, b2), fmt_bytes(arena, b3));
    len = w2 < 0 ? sizeof line2 : len + (size_t)w2;
  }
  if (t->meas && len < sizeof line2) snprintf(line2 + len, sizeof line2 - len, "  \xc2\xb7  measured: the red line");
  text(t->out, MARGIN_L, 64, "subtitle", NULL, line2);
}

/* Everything under the <svg> element; *height: where it ends. */
static dc_status *draw_body(timeline *t, const char *head, double *height) {
  heading(t, head);
  double y = 92;
  for (int d = 0; d < t->pred->ndevices; d++) y = panel(t, d, y);
  if (t->m->nphases) {
    phase_band(t, y);
    y += BAND_H;
  }
  DC_TRY(module_band(t, y));
  y += BAND_H + 16;
  text(t->out, MARGIN_L + PLOT_W / 2.0, y, "axis-title", "middle", "schedule step (one step = one node of the plan)");
  *height = y + 14;
  return NULL;
}

dc_status *dc_memory_timeline_svg(const dc_module *m, const dc_mem_series *predicted, const dc_mem_series *measured,
                                  dc_buf *out) {
  if (!m->nnodes) return dc_error(DC_ERR_ARGUMENT, "memory timeline: the module has no steps to draw");
  DC_TRY(check_series(m, predicted, "predicted"));
  if (measured) {
    DC_TRY(check_series(m, measured, "measured"));
    if (measured->ndevices != predicted->ndevices)
      return dc_error(DC_ERR_MISMATCH, "memory timeline: the measured series covers %d device(s), the plan %d",
                      measured->ndevices, predicted->ndevices);
  }
  timeline t = {.m = m, .pred = predicted, .meas = measured, .n = m->nnodes, .out = out};
  t.bins = t.n < PLOT_W ? t.n : PLOT_W;
  t.first = dc_calloc((size_t)t.bins + 1, sizeof *t.first);
  t.rep = dc_calloc((size_t)t.bins, sizeof *t.rep);
  if (!t.first || !t.rep) {
    dc_free(t.first), dc_free(t.rep);
    return dc_nomem("drawing the memory timeline");
  }
  for (int32_t k = 0; k <= t.bins; k++) t.first[k] = (int32_t)((int64_t)k * t.n / t.bins);
  uint64_t ymax = 0;
  for (int d = 0; d < predicted->ndevices; d++)
    for (int32_t s = 0; s < t.n; s++) {
      uint64_t v[3] = {total_at(predicted, s, d), dc_mem_series_at(predicted, s, d, DC_MEM_WEIGHTS) + arena_at(predicted, s, d),
                       measured ? total_at(measured, s, d) : 0};
      uint64_t w = measured ? dc_mem_series_at(measured, s, d, DC_MEM_WEIGHTS) + arena_at(measured, s, d) : 0;
      for (int j = 0; j < 3; j++) ymax = v[j] > ymax ? v[j] : ymax;
      ymax = w > ymax ? w : ymax;
    }
  choose_scale(&t, ymax);

  const char *cls = dc_module_get_meta(m, "class");
  char head[LABEL_MAX];
  label_f(head, "Device memory over the schedule \xe2\x80\x94 %s", cls ? cls : "module");
  dc_buf body; /* drawn first: its height sets the header's */
  dc_buf_init(&body);
  t.out = &body;
  double height;
  dc_status *st = draw_body(&t, head, &height);
  if (!st) st = dc_buf_status(&body, "drawing the memory timeline");
  if (!st) {
    dc_buf_printf(out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    dc_buf_printf(out,
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\" viewBox=\"0 0 %d %.0f\" "
                  "data-steps=\"%d\" data-devices=\"%d\">\n",
                  WIDTH, height, WIDTH, height, t.n, predicted->ndevices);
    dc_buf_printf(out, "<title>");
    put_escaped(out, head);
    dc_buf_printf(out, "</title>\n%s", style);
    dc_buf_printf(out, "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n");
    dc_buf_append(out, body.data, body.len);
    dc_buf_printf(out, "</svg>\n");
    st = dc_buf_status(out, "drawing the memory timeline");
  }
  dc_buf_deinit(&body);
  dc_free(t.first);
  dc_free(t.rep);
  return st;
}

dc_status *dc_memory_timeline_write(const dc_module *m, const dc_mem_series *measured, const char *path) {
  dc_liveness l;
  DC_TRY(dc_liveness_compute(m, &l));
  dc_mem_series s;
  dc_status *st = dc_mem_series_compute(m, &l, &s);
  dc_liveness_deinit(&l);
  if (st) return st;
  dc_buf b;
  dc_buf_init(&b);
  st = dc_memory_timeline_svg(m, &s, measured, &b);
  dc_mem_series_deinit(&s);
  if (!st) st = dc_atomic_write_file(path, b.data, b.len);
  dc_buf_deinit(&b);
  return dc_status_annotate(st, "writing the memory timeline %s", path);
}

dc_status *dc_memory_timeline_check_path(const char *path) {
  size_t n = strlen(path);
  if (n < 5 || strcmp(path + n - 4, ".svg") != 0)
    return dc_error(DC_ERR_ARGUMENT, "--memory-timeline %s: the timeline is an SVG picture: name the file *.svg", path);
  char *dir = dc_path_parent(path);
  if (!dir) return dc_nomem("checking the memory timeline's path");
  dc_status *st = NULL;
  if (!dc_dir_exists(dir)) st = dc_error(DC_ERR_IO, "--memory-timeline %s: cannot write it: no folder %s", path, dir);
  else if (access(dir, W_OK) != 0)
    st = dc_error(DC_ERR_IO, "--memory-timeline %s: cannot write in %s: %s", path, dir, strerror(errno));
  else if (dc_dir_exists(path)) st = dc_error(DC_ERR_IO, "--memory-timeline %s: is a folder; name the SVG file", path);
  dc_free(dir);
  return st;
}
