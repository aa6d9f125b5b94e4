/* test_memory_timeline.c — ir/memory_timeline.c: the SVG of a planned
 * module is well-formed XML (xmllint when installed, and a tag-balance and
 * escaping check of our own always), names the peak step's module path and
 * op, has one upload tick per upload, a legend whose numbers are the series
 * at the peak, the phases of a pipeline; renders the same bytes twice;
 * draws a measured series when given one (and refuses one of other steps);
 * escapes labels; stays under 1 MiB for 10k steps; is written atomically. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../driver/compile.h"
#include "testutil.h"

static void series_of(const dc_module *m, dc_mem_series *s) {
  dc_liveness l;
  CHECK_OK(dc_liveness_compute(m, &l));
  CHECK_OK(dc_mem_series_compute(m, &l, s));
  dc_liveness_deinit(&l);
}

/* The SVG as a NUL-terminated string (malloc'd). */
static char *render(const dc_module *m, const dc_mem_series *pred, const dc_mem_series *meas) {
  dc_buf b;
  dc_buf_init(&b);
  CHECK_OK(dc_memory_timeline_svg(m, pred, meas, &b));
  dc_buf_u8(&b, 0);
  char *s = dc_strdup((const char *)b.data);
  dc_buf_deinit(&b);
  return s;
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* Our own well-formedness check: every tag closed in order, no raw '<' or
 * '&' in text or attributes but as markup and entities. */
static int balanced(const char *s) {
  const char *stack[64];
  size_t len[64];
  int depth = 0;
  for (const char *p = s; *p; p++) {
    if (*p == '&') {
      if (strncmp(p, "&amp;", 5) && strncmp(p, "&lt;", 4) && strncmp(p, "&gt;", 4) && strncmp(p, "&quot;", 6) &&
          strncmp(p, "&apos;", 6))
        return 0;
      continue;
    }
    if (*p != '<') continue;
    const char *end = strchr(p, '>');
    if (!end) return 0;
    for (const char *q = p + 1; q < end; q++)
      if (*q == '<') return 0;
    if (p[1] == '?') {
      p = end;
      continue;
    }
    if (p[1] == '/') {
      size_t n = (size_t)(end - p - 2);
      if (!depth || len[depth - 1] != n || strncmp(stack[depth - 1], p + 2, n)) return 0;
      depth--;
    } else if (end[-1] != '/') {
      if (depth == 64) return 0;
      const char *name = p + 1;
      size_t n = strcspn(name, " >");
      stack[depth] = name, len[depth++] = n;
    }
    p = end;
  }
  return depth == 0;
}

static int has_tool(const char *tool) {
  char *cmd = dc_asprintf("command -v %s >/dev/null 2>&1", tool);
  int ok = cmd && system(cmd) == 0;
  dc_free(cmd);
  return ok;
}

static void check_xml(const char *svg, const char *name) {
  CHECK(balanced(svg));
  if (!has_tool("xmllint")) {
    printf("xmllint not installed: the tag-balance check stands alone for %s\n", name);
    return;
  }
  char *path = tu_path(name);
  tu_write_file(path, svg, strlen(svg));
  char *cmd = dc_asprintf("xmllint --noout '%s'", path);
  CHECK(cmd && system(cmd) == 0);
  dc_free(cmd), dc_free(path);
}

static int32_t peak_step(const dc_mem_series *s, int d) {
  int32_t best = 0;
  uint64_t most = 0;
  for (int32_t i = 0; i < s->nsteps; i++) {
    uint64_t v = 0;
    for (int k = 0; k < DC_MEM_KINDS; k++) v += dc_mem_series_at(s, i, d, (dc_mem_kind)k);
    if (v > most) most = v, best = i;
  }
  return best;
}

/* The peak label names the step, its op and module path; the legend's
 * numbers are the series at that step; one upload tick per upload. */
static void check_content(const dc_module *m, const dc_mem_series *s, const char *svg) {
  int32_t peak = peak_step(s, 0);
  char want[160];
  snprintf(want, sizeof want, "<g class=\"peak\" data-step=\"%d\"", peak);
  CHECK(strstr(svg, want) != NULL);
  const dc_node *n = &m->nodes[peak];
  CHECK(n->scope != NULL);
  snprintf(want, sizeof want, "live at step %d: %s %s</text>", peak, dc_op_get(n->op)->name, n->scope ? n->scope : "");
  CHECK(strstr(svg, want) != NULL);
  int kinds_drawn = 0;
  for (int k = 0; k < DC_MEM_KINDS; k++) {
    uint64_t most = 0;
    for (int32_t i = 0; i < s->nsteps; i++)
      if (dc_mem_series_at(s, i, 0, (dc_mem_kind)k) > most) most = dc_mem_series_at(s, i, 0, (dc_mem_kind)k);
    snprintf(want, sizeof want, "<g class=\"legend\" data-kind=\"%s\" data-bytes=\"", dc_mem_kind_name((dc_mem_kind)k));
    const char *at = strstr(svg, want);
    CHECK(!at == !most); /* a kind is in the legend when it is drawn */
    if (at) {
      kinds_drawn++;
      CHECK(strtoull(at + strlen(want), NULL, 10) == dc_mem_series_at(s, peak, 0, (dc_mem_kind)k));
    }
  }
  CHECK(kinds_drawn == count(svg, "<path class=\"area\""));
  /* a tooltip column per pixel column (per step when they are fewer), naming the step's module */
  const char *hover = strstr(svg, "<g class=\"hover\">");
  const char *hover_end = hover ? strstr(hover, "</g>") : NULL;
  int columns = 0;
  for (const char *p = hover; p && p < hover_end; p = strstr(p + 1, "<rect ")) columns += p != hover;
  CHECK(columns == (m->nnodes < 1088 ? m->nnodes : 1088)); /* the plot is 1088 px wide */
  snprintf(want, sizeof want, "step %d: %s %s \xe2\x80\x94 ", peak, dc_op_get(n->op)->name, n->scope ? n->scope : "");
  CHECK(hover && strstr(hover, want) != NULL);
  int uploads = 0;
  for (int32_t i = 0; i < m->nnodes; i++) uploads += m->nodes[i].op == OP_UPLOAD;
  CHECK(uploads > 0);
  CHECK(count(svg, "<path class=\"upload\"") == uploads);
}

/* A measured series is drawn as a line; one over other steps is refused. */
static void check_measured(const dc_module *m, const dc_mem_series *s, const char *plain) {
  CHECK(strstr(plain, "class=\"measured\"") == NULL);
  size_t cells = (size_t)s->ndevices * (size_t)s->nsteps;
  dc_mem_series meas = {.nsteps = s->nsteps, .ndevices = s->ndevices,
                        .bytes = dc_malloc(cells * DC_MEM_KINDS * sizeof(uint64_t)),
                        .arena_top = dc_malloc(cells * sizeof(uint64_t))};
  memcpy(meas.bytes, s->bytes, cells * DC_MEM_KINDS * sizeof(uint64_t));
  memcpy(meas.arena_top, s->arena_top, cells * sizeof(uint64_t));
  for (size_t c = 0; c < cells; c++) meas.bytes[c * DC_MEM_KINDS + DC_MEM_ACTIVATIONS] /= 2;
  char *svg = render(m, s, &meas);
  CHECK(svg && count(svg, "<path class=\"measured\"") == s->ndevices);
  CHECK(svg && strstr(svg, "<path class=\"measured\" d=\"M") != NULL);
  CHECK(svg && strcmp(svg, plain) != 0);
  dc_free(svg);
  meas.nsteps--;
  dc_buf b;
  dc_buf_init(&b);
  CHECK_ERR(dc_memory_timeline_svg(m, s, &meas, &b), "the measured series has");
  dc_buf_deinit(&b);
  dc_mem_series_deinit(&meas);
}

static void check_module(dc_module *m, const char *name) {
  dc_mem_series s;
  series_of(m, &s);
  char *a = render(m, &s, NULL), *b = render(m, &s, NULL);
  CHECK(a && b && !strcmp(a, b)); /* deterministic */
  check_xml(a, name);
  check_content(m, &s, a);
  check_measured(m, &s, a);
  CHECK(strlen(a) < (1u << 20));
  printf("%s: %d steps, %zu bytes of SVG\n", name, m->nnodes, strlen(a));
  if (m->nphases)
    for (int p = 0; p < m->nphases; p++) {
      char want[96];
      snprintf(want, sizeof want, "<title>%s: steps ", m->phases[p].name);
      CHECK(strstr(a, want) != NULL);
    }
  dc_free(a), dc_free(b);
  dc_mem_series_deinit(&s);
}

/* Every allocation a render makes can fail: each failure is an error (no
 * picture with a piece quietly missing), and nothing leaks (valgrind). */
static void check_alloc_failures(const dc_module *m, const dc_mem_series *s) {
  long before = dc_alloc_count();
  dc_buf b;
  dc_buf_init(&b);
  CHECK_OK(dc_memory_timeline_svg(m, s, NULL, &b));
  dc_buf_deinit(&b);
  long used = dc_alloc_count() - before, failed = 0;
  for (long n = 0; n < used; n++) {
    dc_buf_init(&b);
    dc_alloc_fail_after(n);
    dc_status *st = dc_memory_timeline_svg(m, s, NULL, &b);
    dc_alloc_fail_after(-1);
    failed += st != NULL && dc_status_code_of(st) == DC_ERR_NOMEM;
    dc_status_free(st);
    dc_buf_deinit(&b);
  }
  CHECK(used > 0 && failed == used);
  printf("allocation failures: %ld of %ld surfaced as errors\n", failed, used);
}

/* 10k steps, 2500 of them uploads with their tooltips: under 1 MiB, and
 * every upload still has its tick. */
static void check_large(void) {
  dc_module *m = dc_module_create();
  dc_type t = {DT_F32, 2, {1, 64}};
  int32_t x = dc_module_add_input(m, "sample", &t, INIT_NORMAL);
  dc_weight_file wf = {.path = "/nonexistent/w.safetensors", .file_size = 1u << 20};
  CHECK(dc_module_add_file(m, &wf) == 0);
  int uploads = 0;
  for (int i = 0; m->nnodes < 10000; i++) {
    char scope[64], wname[80];
    snprintf(scope, sizeof scope, "down_blocks.%d.resnets.%d", i / 100, i % 100);
    snprintf(wname, sizeof wname, "%s.weight", scope);
    dc_weight w = {.name = wname, .file = 0, .offset = (uint64_t)i * 256, .bytes = 256, .type = t};
    dc_node wn = dc_node_make(OP_WEIGHT, 0, NULL);
    wn.ref = dc_module_add_weight(m, &w), wn.type = t;
    int32_t wid = dc_module_add_node(m, &wn);
    dc_node up = dc_node_make(OP_UPLOAD, 1, &wid);
    up.type = t, up.scope = dc_arena_strdup(m->arena, scope);
    int32_t uid = dc_module_add_node(m, &up);
    uploads++;
    dc_node s = dc_node_make(OP_SILU, 1, &x);
    s.type = t, s.scope = up.scope;
    x = dc_module_add_node(m, &s);
    int32_t in[2] = {x, uid};
    dc_node add = dc_node_make(OP_ADD, 2, in);
    add.type = t, add.scope = up.scope;
    x = dc_module_add_node(m, &add);
  }
  CHECK_OK(dc_module_add_output(m, "sample", x));
  CHECK_OK(dc_verify(m, "test"));
  dc_mem_series s;
  series_of(m, &s);
  char *svg = render(m, &s, NULL);
  CHECK(svg && strlen(svg) < (1u << 20));
  CHECK(svg && count(svg, "<path class=\"upload\"") == uploads);
  CHECK(svg && balanced(svg));
  printf("synthetic: %d steps, %d uploads, %zu bytes of SVG\n", m->nnodes, uploads, svg ? strlen(svg) : 0);
  dc_free(svg);
  dc_mem_series_deinit(&s);
  dc_module_destroy(m);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  dc_module *group = tu_compile_fixture("unet_tiny/model", &(dc_memory_options){.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_BLOCK,
                                                                  .blocks_per_group = 1, .prefetch = 1});
  check_module(group, "unet_tiny.svg");
  dc_mem_series s;
  series_of(group, &s);
  check_alloc_failures(group, &s);
  /* labels are escaped: metadata with markup characters stays text */
  CHECK_OK(dc_module_set_meta(group, "storage", "a<b & \"c\" > 'd'"));
  char *svg = render(group, &s, NULL);
  CHECK(svg && strstr(svg, "storage a&lt;b &amp; &quot;c&quot; &gt; &apos;d&apos;") != NULL);
  if (svg) check_xml(svg, "escaped.svg");
  dc_free(svg);
  dc_mem_series_deinit(&s);
  /* the file: written under its name, no temporary left */
  char *path = tu_path("timeline.svg");
  CHECK_OK(dc_memory_timeline_write(group, NULL, path));
  char *data = NULL;
  size_t size = 0;
  CHECK_OK(dc_file_read_all(path, &data, &size));
  CHECK(size > 1000 && data && !strncmp(data, "<?xml", 5));
  CHECK(tu_tmp_files_left() == 0);
  CHECK_ERR(dc_memory_timeline_check_path("out.png"), "name the file *.svg");
  CHECK_ERR(dc_memory_timeline_check_path("/nonexistent-folder/out.svg"), "no folder");
  CHECK_OK(dc_memory_timeline_check_path(path));
  dc_free(data), dc_free(path);
  dc_module_destroy(group);

  dc_module *pipe = tu_compile_fixture("pipelines/sd", &(dc_memory_options){.offload = DC_OFFLOAD_MODEL});
  check_module(pipe, "sd_pipeline.svg");
  dc_module_destroy(pipe);
  check_large();
  return tu_finish();
}
