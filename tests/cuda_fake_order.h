/* cuda_fake_order.h — a happens-before check over the fake driver's call
 * log (cuda_fake_driver.h), header-only.  Vector clocks over the streams:
 * an operation enqueued on a stream follows that stream's earlier
 * operations, what the stream waited for (an event carries the clock of
 * its stream when it was recorded) and what the host had seen finish
 * (stream and event synchronisations) when it enqueued it.  Every pair of
 * device operations (copies, peer copies, launches: the bytes each reads
 * and writes, a launch's sizes from the node its kernel stands for) that
 * touch the same bytes, one of them writing, must be ordered so; and every
 * operation must have finished, as far as the host knows, at the end of the
 * log.  The fake itself runs everything at once, so this is what says the
 * streams and events would also be right on a GPU. */
#ifndef DC_CUDA_FAKE_ORDER_H
#define DC_CUDA_FAKE_ORDER_H

#include "cuda_fake_driver.h"

#define NSTREAMS 16 /* streams a log may use */
typedef struct {
  int t[NSTREAMS];
} vclock;

typedef struct {
  uint64_t lo, hi;
  int write;
} range;

typedef struct {
  int call, stream;
  vclock at;
  range r[DC_MAX_INPUTS + 2];
  int nr;
} access_op;

typedef struct {
  int pairs;             /* pairs of operations touching the same bytes, one writing */
  int cross_stream;      /* of them, pairs on two streams (ordered only by events or host waits) */
  int races;             /* of them, pairs not ordered */
  int unfinished;        /* operations the host had not waited for by the end */
  int host_refill_races; /* host_refills: a source rewritten while an earlier copy may still read it */
  char first[200];       /* the first race found, by call index */
} race_report;

static void vc_join(vclock *a, const vclock *b) {
  for (int i = 0; i < NSTREAMS; i++)
    if (b->t[i] > a->t[i]) a->t[i] = b->t[i];
}

static int stream_index(int *ids, int *n, int id) {
  for (int i = 0; i < *n; i++)
    if (ids[i] == id) return i;
  if (*n == NSTREAMS) abort();
  ids[*n] = id;
  return (*n)++;
}

static void add_range(access_op *op, uint64_t at, uint64_t bytes, int write) {
  op->r[op->nr++] = (range){at, at + bytes, write};
}

/* The bytes a logged operation reads and writes. */
static void op_ranges(const fake_call *c, access_op *op) {
  switch (c->kind) {
    case C_HTOD: add_range(op, c->src, c->bytes, 0), add_range(op, c->dst, c->bytes, 1); break;
    case C_DTOH: add_range(op, c->src, c->bytes, 0), add_range(op, c->dst, c->bytes, 1); break;
    case C_PEER: add_range(op, c->src, c->bytes, 0), add_range(op, c->dst, c->bytes, 1); break;
    case C_LAUNCH: {
      const dc_node *n = &fk.m->nodes[fk.kernel_node[kernel_index(c->fn)]];
      add_range(op, c->params[0], dc_type_bytes(&n->type), 1);
      for (int i = 0; i < n->ninputs; i++)
        add_range(op, c->params[i + 1], dc_type_bytes(&fk.m->nodes[n->inputs[i]].type), 0);
      break;
    }
  }
}

static int before(const access_op *a, const vclock *b) { return a->at.t[a->stream] <= b->t[a->stream]; }

static void note_race(race_report *rep, const char *what, int a, int b) {
  if (!rep->first[0]) snprintf(rep->first, sizeof rep->first, "%s: calls %d and %d", what, a, b);
}

/* Checks calls[0, n).  host_refills: the host writes an HtoD's source right
 * before it (the on-demand bounce chunks): earlier readers of it must have
 * finished by then. */
static race_report check_races(const fake_call *calls, int n, int host_refills) {
  static vclock ev[MAX_OBJS + 1];
  race_report rep;
  memset(&rep, 0, sizeof rep);
  memset(ev, 0, sizeof ev);
  vclock st[NSTREAMS], host;
  memset(st, 0, sizeof st), memset(&host, 0, sizeof host);
  int ids[NSTREAMS], nids = 0, nops = 0;
  access_op *ops = calloc((size_t)n + 1, sizeof *ops);
  for (int i = 0; i < n; i++) {
    const fake_call *c = &calls[i];
    int streamed = c->kind == C_RECORD || c->kind == C_WAIT || c->kind == C_STREAMSYNC || c->kind == C_HTOD ||
                   c->kind == C_DTOH || c->kind == C_PEER || c->kind == C_LAUNCH;
    int s = streamed ? stream_index(ids, &nids, c->stream) : -1;
    switch (c->kind) {
      case C_RECORD: vc_join(&st[s], &host), ev[c->event] = st[s]; break;
      case C_WAIT: vc_join(&st[s], &host), vc_join(&st[s], &ev[c->event]); break;
      case C_STREAMSYNC: vc_join(&host, &st[s]); break;
      case C_EVSYNC: vc_join(&host, &ev[c->event]); break;
      case C_HTOD: case C_DTOH: case C_PEER: case C_LAUNCH: {
        vc_join(&st[s], &host);
        st[s].t[s]++;
        access_op *op = &ops[nops++];
        op->call = i, op->stream = s, op->at = st[s];
        op_ranges(c, op);
        for (int j = 0; host_refills && c->kind == C_HTOD && j < nops - 1; j++)
          for (int k = 0; k < ops[j].nr; k++)
            if (!ops[j].r[k].write && ops[j].r[k].lo < c->src + c->bytes && c->src < ops[j].r[k].hi &&
                !before(&ops[j], &host)) {
              rep.host_refill_races++;
              note_race(&rep, "host refilled a chunk still being copied", ops[j].call, i);
            }
        break;
      }
    }
  }
  for (int a = 0; a < nops; a++)
    for (int b = a + 1; b < nops; b++) {
      int conflict = 0;
      for (int x = 0; x < ops[a].nr; x++)
        for (int y = 0; y < ops[b].nr; y++)
          conflict |= (ops[a].r[x].write || ops[b].r[y].write) && ops[a].r[x].lo < ops[b].r[y].hi &&
                      ops[b].r[y].lo < ops[a].r[x].hi;
      if (!conflict) continue;
      rep.pairs++;
      rep.cross_stream += ops[a].stream != ops[b].stream;
      if (!before(&ops[a], &ops[b].at)) {
        rep.races++;
        note_race(&rep, "unordered accesses to the same bytes", ops[a].call, ops[b].call);
      }
    }
  for (int a = 0; a < nops; a++) rep.unfinished += !before(&ops[a], &host);
  free(ops);
  return rep;
}

#endif
