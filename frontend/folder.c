/* folder.c — find a model's config and weights on disk the way diffusers
 * lays them out, and open them.
 *
 * A model folder holds config.json and either one weight file
 * (diffusion_pytorch_model[.<variant>].safetensors) or a shard index
 * (diffusion_pytorch_model.safetensors.index[.<variant>].json) whose
 * weight_map sends each tensor to a shard; a transformers model (its config
 * names "architectures", not "_class_name") names them model[.<variant>]
 * .safetensors and model.safetensors.index[.<variant>].json.  A pipeline folder holds
 * model_index.json and one subfolder per component.  Every shard is mmapped
 * once; the folder then lists every tensor of every shard by name, after
 * checking that the index and the shards agree tensor for tensor.  Paths stay
 * as the user gave them (messages name what they typed); the plan records
 * them absolute, so it can refer to its weight files from anywhere. */
#include "frontend.h"
#include "registry.h"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* The names a library gives a model's weights: <stem>.safetensors,
 * <stem>.safetensors.index.json and their variants (<stem>.fp16.safetensors,
 * <stem>.safetensors.index.fp16.json); pickles start with bin_stem. */
typedef struct {
  const char *stem, *bin_stem;
} folder_names;
static const folder_names diffusers_names = {"diffusion_pytorch_model", "diffusion_pytorch_model"};
static const folder_names transformers_names = {"model", "pytorch_model"};

/* A config names its class by "_class_name" (diffusers) or by
 * "architectures" (transformers), as dc_class_of_config reads it. */
static const folder_names *folder_names_for(const dc_json_doc *config) {
  return cJSON_GetObjectItemCaseSensitive(config->root, "_class_name") ? &diffusers_names : &transformers_names;
}

static const folder_names *folder_names_of(const dc_folder *f) { return folder_names_for(&f->config); }

const char *dc_weights_stem(const dc_json_doc *config) { return folder_names_for(config)->stem; }

/* ---- paths ---------------------------------------------------------------- */

/* The folder as the user named it (trailing "/" and "/." dropped): messages show
 * the path they typed, symlinks unresolved.  What a plan records is made
 * absolute where it is recorded (dc_path_absolute). */
static dc_status *folder_check_dir(const char *path, char **out) {
  *out = NULL;
  if (!dc_dir_exists(path)) {
    if (dc_file_exists(path))
      return dc_error(DC_ERR_IO, "%s: not a directory (expected a diffusers model folder)", path);
    return dc_error(DC_ERR_IO, "%s: no such directory", path);
  }
  size_t n = strlen(path);
  for (;;) { /* "dir/", "dir/." and "dir/./" name dir */
    if (n > 1 && path[n - 1] == '/') n--;
    else if (n > 2 && path[n - 1] == '.' && path[n - 2] == '/') n -= 2;
    else break;
  }
  *out = dc_strndup(path, n);
  return *out ? NULL : dc_nomem("opening a model folder");
}

/* A name that stays inside the folder: no separators, not "." or "..". */
static int folder_plain_name(const char *s) {
  return s[0] && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static int folder_str_cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* ---- pipelines (model_index.json) ----------------------------------------- */

/* Components are keys whose value is ["diffusers"|"transformers", "Class"]
 * (null entries such as a missing safety_checker are not components). */
static int folder_is_component(const cJSON *v) {
  if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2) return 0;
  const cJSON *lib = v->child, *cls = v->child->next;
  if (!cJSON_IsString(lib) || !cJSON_IsString(cls)) return 0;
  return strcmp(lib->valuestring, "diffusers") == 0 ||
         strcmp(lib->valuestring, "transformers") == 0;
}

static const char *folder_component_library(const cJSON *v) { return v->child->valuestring; }
static const char *folder_component_class(const cJSON *v) { return v->child->next->valuestring; }

/* A component diffc can compile: a class of its library in the registry. */
static int folder_is_compilable(const cJSON *v) {
  if (!folder_is_component(v)) return 0;
  dc_library lib = !strcmp(folder_component_library(v), "diffusers") ? DC_LIB_DIFFUSERS : DC_LIB_TRANSFORMERS;
  return dc_class_find(lib, folder_component_class(v)) != NULL;
}

/* The components, sorted, into b: those diffc compiles ("unet, vae"), then
 * the others with their classes, so a user sees at once what is missing. */
static void folder_list_components(const dc_json_doc *mi, dc_buf *b) {
  int n = 0;
  for (const cJSON *c = mi->root->child; c; c = c->next) n += folder_is_component(c);
  const char **names = dc_malloc(sizeof *names * (size_t)(n ? n : 1));
  if (!names) {
    b->failed = 1;
    return;
  }
  int i = 0;
  for (const cJSON *c = mi->root->child; c; c = c->next)
    if (folder_is_component(c)) names[i++] = c->string;
  qsort(names, (size_t)n, sizeof *names, folder_str_cmp);
  int shown = 0, others = 0;
  for (i = 0; i < n; i++)
    if (folder_is_compilable(cJSON_GetObjectItemCaseSensitive(mi->root, names[i])))
      dc_buf_printf(b, "%s%s", shown++ ? ", " : "", names[i]);
  if (shown == 0) dc_buf_printf(b, "none that diffc compiles yet (it compiles %s)", dc_frontend_supported_classes());
  for (i = 0; i < n; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(mi->root, names[i]);
    if (folder_is_compilable(v)) continue;
    dc_buf_printf(b, "%s%s (%s %s)", others++ ? ", " : "; not supported yet: ", names[i],
                  folder_component_library(v), folder_component_class(v));
  }
  dc_buf_u8(b, 0);
  dc_free(names);
}

static dc_status *folder_component_error(const char *dir, const dc_json_doc *mi,
                                         const char *component) {
  const cJSON *v = component ? cJSON_GetObjectItemCaseSensitive(mi->root, component) : NULL;
  if (v && folder_is_component(v) && !folder_is_compilable(v))
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: component \"%s\" is the %s class %s, which diffc does not compile yet (it compiles %s)",
                    mi->path, component, folder_component_library(v), folder_component_class(v),
                    dc_frontend_supported_classes());
  dc_buf b;
  dc_buf_init(&b);
  folder_list_components(mi, &b);
  dc_status *st = dc_buf_status(&b, "listing pipeline components");
  if (!st && !component)
    st = dc_error(DC_ERR_ARGUMENT,
                  "%s is a pipeline folder (model_index.json); choose a component with "
                  "--component: %s",
                  dir, (const char *)b.data);
  else if (!st)
    st = dc_error(DC_ERR_ARGUMENT, "%s: no component \"%s\" (components: %s)", mi->path, component,
                  (const char *)b.data);
  dc_buf_deinit(&b);
  return st;
}

/* Replaces *dir (a pipeline folder) by the path of its component. */
static dc_status *folder_enter_component(char **dir, const char *mi_path, const char *component) {
  dc_json_doc mi;
  DC_TRY(dc_json_load(mi_path, &mi));
  const cJSON *v = component ? cJSON_GetObjectItemCaseSensitive(mi.root, component) : NULL;
  dc_status *st = NULL;
  if (!component || !folder_plain_name(component) || !folder_is_compilable(v))
    st = folder_component_error(*dir, &mi, component);
  dc_json_free(&mi);
  if (st) return st;
  char *sub = dc_path_join(*dir, component), *abs = NULL;
  if (!sub) return dc_nomem("opening a pipeline component");
  st = folder_check_dir(sub, &abs);
  dc_free(sub);
  if (st) return st;
  dc_free(*dir);
  *dir = abs;
  return NULL;
}

/* ---- finding the weights ---------------------------------------------------- */

/* The variant a file in the folder was saved with, if it is a weights file
 * of another variant ("" for the plain names); NULL otherwise. */
static char *folder_file_variant(const folder_names *fn, const char *name) {
  static const char index[] = "safetensors.index.";
  size_t n = strlen(name), ls = strlen(fn->stem);
  if (strncmp(name, fn->stem, ls) != 0 || name[ls] != '.') return NULL;
  const char *rest = name + ls + 1; /* after "<stem>." */
  size_t nr = n - ls - 1;
  if (strcmp(rest, "safetensors") == 0 || strcmp(rest, "safetensors.index.json") == 0) return dc_strdup("");
  const char *v = NULL, *end = NULL;
  if (strncmp(rest, index, sizeof index - 1) == 0 && nr > sizeof index - 1 + 5 && strcmp(name + n - 5, ".json") == 0)
    v = rest + sizeof index - 1, end = name + n - 5;
  else if (nr > 12 && strcmp(name + n - 12, ".safetensors") == 0)
    v = rest, end = name + n - 12;
  if (!v || end <= v || memchr(v, '.', (size_t)(end - v)) || memchr(v, '-', (size_t)(end - v)))
    return NULL;
  return dc_strndup(v, (size_t)(end - v));
}

/* A hint for one file of the folder, or NULL (with *oom set if that is why). */
static char *folder_hint(const folder_names *fn, const char *name, const char *variant, int *oom) {
  size_t n = strlen(name), stem = strlen(fn->bin_stem);
  char *h = NULL, *v = folder_file_variant(fn, name);
  if (v && strcmp(v, variant ? variant : "") != 0)
    h = v[0] ? dc_asprintf("found %s: pass --variant %s", name, v)
             : dc_asprintf("found %s: drop --variant", name);
  else if (!v && strncmp(name, fn->bin_stem, stem) == 0 && n >= stem + 4 &&
           strcmp(name + n - 4, ".bin") == 0)
    h = dc_asprintf("found %s: diffc reads only .safetensors; convert it", name);
  else {
    dc_free(v);
    return NULL;
  }
  dc_free(v);
  *oom = !h;
  return h;
}

/* Hints about weights files that are there but were not asked for, sorted
 * and joined: " (found X: pass --variant V; ...)". */
static dc_status *folder_variant_hints(const folder_names *fn, const char *dir, const char *variant, dc_buf *b) {
  DIR *dp = opendir(dir);
  if (!dp) return NULL;
  char **hints = NULL;
  int n = 0, cap = 0, oom = 0;
  for (struct dirent *de; !oom && (de = readdir(dp));) {
    char *h = folder_hint(fn, de->d_name, variant, &oom);
    if (!h) continue;
    if (n == cap) {
      char **nh = dc_realloc(hints, sizeof *hints * (size_t)(cap ? 2 * cap : 4));
      if (!nh) {
        dc_free(h);
        oom = 1;
        break;
      }
      hints = nh, cap = cap ? 2 * cap : 4;
    }
    hints[n++] = h;
  }
  closedir(dp);
  if (n) qsort(hints, (size_t)n, sizeof *hints, folder_str_cmp);
  for (int i = 0; i < n; i++) dc_buf_printf(b, "%s%s", i ? "; " : " (", hints[i]);
  if (n) dc_buf_u8(b, ')');
  for (int i = 0; i < n; i++) dc_free(hints[i]);
  dc_free(hints);
  return oom ? dc_nomem("listing a model folder") : NULL;
}

static dc_status *folder_no_weights(const folder_names *fn, const char *dir, const char *variant,
                                    const char *single, const char *index) {
  dc_buf b;
  dc_buf_init(&b);
  if (variant) dc_buf_printf(&b, "%s: no weights for variant \"%s\"", dir, variant);
  else dc_buf_printf(&b, "%s: no weights", dir);
  dc_buf_printf(&b, ": expected %s or %s", single, index);
  dc_status *st = folder_variant_hints(fn, dir, variant, &b);
  dc_buf_u8(&b, 0);
  if (!st) st = dc_buf_status(&b, "listing a model folder");
  if (!st) st = dc_error(DC_ERR_IO, "%s", (const char *)b.data);
  dc_buf_deinit(&b);
  return st;
}

/* Sets exactly one of *single / *index to the weights path that exists. */
static dc_status *folder_locate_weights(const folder_names *fn, const char *dir, const char *variant,
                                        char **single, char **index) {
  if (variant && (!folder_plain_name(variant) || strchr(variant, '.')))
    return dc_error(DC_ERR_ARGUMENT, "--variant \"%s\" must be a plain name such as fp16", variant);
  char *sname = variant ? dc_asprintf("%s.%s.safetensors", fn->stem, variant)
                        : dc_asprintf("%s.safetensors", fn->stem);
  char *iname = variant ? dc_asprintf("%s.safetensors.index.%s.json", fn->stem, variant)
                        : dc_asprintf("%s.safetensors.index.json", fn->stem);
  *single = sname ? dc_path_join(dir, sname) : NULL;
  *index = iname ? dc_path_join(dir, iname) : NULL;
  dc_status *st = NULL;
  if (!*single || !*index) st = dc_nomem("opening a model folder");
  else if (dc_file_exists(*single)) dc_free(*index), *index = NULL;
  else if (dc_file_exists(*index)) dc_free(*single), *single = NULL;
  else st = folder_no_weights(fn, dir, variant, sname, iname);
  dc_free(sname);
  dc_free(iname);
  if (st) {
    dc_free(*single);
    dc_free(*index);
    *single = *index = NULL;
  }
  return st;
}

/* ---- the shard index ---------------------------------------------------------- */

/* weight_map, sorted by tensor name, with the shard of each as an index
 * into the sorted list of distinct shard names. */
typedef struct {
  const char *tensor, *shard_name;
  int shard;
} folder_map_item;

typedef struct {
  dc_json_doc doc;
  folder_map_item *items;
  int nitems;
  const char **shards; /* distinct, sorted; strings belong to doc */
  int nshards;
} folder_index;

static void folder_index_free(folder_index *x) {
  dc_free(x->items);
  dc_free(x->shards);
  dc_json_free(&x->doc);
}

static int folder_item_cmp(const void *a, const void *b) {
  return strcmp(((const folder_map_item *)a)->tensor, ((const folder_map_item *)b)->tensor);
}

static dc_status *folder_index_items(folder_index *x, const cJSON *wm) {
  const char *path = x->doc.path;
  int n = cJSON_GetArraySize(wm), i = 0;
  x->items = dc_calloc((size_t)n, sizeof *x->items);
  x->shards = dc_calloc((size_t)n, sizeof *x->shards);
  if (!x->items || !x->shards) return dc_nomem("reading a shard index");
  for (const cJSON *c = wm->child; c; c = c->next, i++) {
    if (!cJSON_IsString(c))
      return dc_error(DC_ERR_FORMAT,
                      "%s: \"weight_map\": \"%s\" must map to a shard file name, got a %s", path,
                      c->string, dc_json_type_name(c));
    if (!folder_plain_name(c->valuestring))
      return dc_error(DC_ERR_FORMAT,
                      "%s: \"weight_map\" names shard \"%s\" (for \"%s\"), which is not a plain "
                      "file name in the folder",
                      path, c->valuestring, c->string);
    x->items[i] = (folder_map_item){c->string, c->valuestring, -1};
    x->shards[i] = c->valuestring;
  }
  x->nitems = n;
  qsort(x->items, (size_t)n, sizeof *x->items, folder_item_cmp);
  for (i = 1; i < n; i++)
    if (strcmp(x->items[i - 1].tensor, x->items[i].tensor) == 0)
      return dc_error(DC_ERR_FORMAT, "%s: \"weight_map\" lists \"%s\" twice", path,
                      x->items[i].tensor);
  return NULL;
}

/* The distinct shard names, sorted, and each item's index into them. */
static void folder_index_shards(folder_index *x) {
  qsort(x->shards, (size_t)x->nitems, sizeof *x->shards, folder_str_cmp);
  int n = 0;
  for (int i = 0; i < x->nitems; i++)
    if (n == 0 || strcmp(x->shards[n - 1], x->shards[i]) != 0) x->shards[n++] = x->shards[i];
  x->nshards = n;
  for (int i = 0; i < x->nitems; i++) {
    const char **s =
        bsearch(&x->items[i].shard_name, x->shards, (size_t)n, sizeof *x->shards, folder_str_cmp);
    x->items[i].shard = (int)(s - x->shards);
  }
}

static dc_status *folder_index_load(const char *path, folder_index *x) {
  memset(x, 0, sizeof *x);
  DC_TRY(dc_json_load(path, &x->doc));
  const cJSON *wm = cJSON_GetObjectItemCaseSensitive(x->doc.root, "weight_map");
  dc_status *st = NULL;
  if (!wm)
    st = dc_error(DC_ERR_FORMAT, "%s: no \"weight_map\" (is this a safetensors index?)", path);
  else if (!cJSON_IsObject(wm))
    st = dc_error(DC_ERR_FORMAT,
                  "%s: \"weight_map\" must be an object mapping tensor names to shard files, "
                  "got a %s",
                  path, dc_json_type_name(wm));
  if (!st) st = folder_index_items(x, wm);
  if (!st && x->nitems == 0) st = dc_error(DC_ERR_FORMAT, "%s: \"weight_map\" is empty", path);
  if (!st) folder_index_shards(x);
  if (st) folder_index_free(x);
  return st;
}

/* Opens every shard the index names, in the order of x->shards. */
static dc_status *folder_open_shards(dc_folder *f, const folder_index *x) {
  f->shards = dc_calloc((size_t)x->nshards, sizeof *f->shards);
  if (!f->shards) return dc_nomem("opening shards");
  for (int s = 0; s < x->nshards; s++) {
    char *p = dc_path_join(f->dir, x->shards[s]);
    if (!p) return dc_nomem("opening shards");
    dc_status *st = NULL;
    if (!dc_file_exists(p)) {
      const char *first = "";
      for (int i = 0; i < x->nitems && !first[0]; i++)
        if (x->items[i].shard == s) first = x->items[i].tensor;
      st = dc_error(DC_ERR_IO,
                    "%s: \"weight_map\" names shard \"%s\" (for \"%s\") but %s does not exist",
                    x->doc.path, x->shards[s], first, p);
    }
    if (!st) st = dc_st_open(p, &f->shards[s]);
    dc_free(p);
    if (st) return st;
    f->nshards++;
  }
  return NULL;
}

/* ---- the merged tensor list ------------------------------------------------- */

static const char *folder_shard_name(const dc_folder *f, int s) {
  const char *p = f->shards[s].file.path, *slash = strrchr(p, '/');
  return slash ? slash + 1 : p;
}

static int folder_entry_cmp(const void *a, const void *b) {
  return strcmp(((const struct dc_folder_entry *)a)->name,
                ((const struct dc_folder_entry *)b)->name);
}

static dc_status *folder_build_entries(dc_folder *f) {
  uint64_t total = 0;
  for (int s = 0; s < f->nshards; s++) total += (uint64_t)f->shards[s].ntensors;
  if (total > INT32_MAX) return dc_error(DC_ERR_UNSUPPORTED, "%s: too many tensors", f->dir);
  f->entries = dc_calloc((size_t)total, sizeof *f->entries);
  if (!f->entries) return dc_nomem("listing tensors");
  for (int s = 0; s < f->nshards; s++)
    for (int i = 0; i < f->shards[s].ntensors; i++) {
      const dc_st_tensor *t = &f->shards[s].tensors[i];
      f->entries[f->nentries++] = (struct dc_folder_entry){.name = t->name, .shard = s, .tensor = t};
    }
  qsort(f->entries, (size_t)f->nentries, sizeof *f->entries, folder_entry_cmp);
  for (int i = 1; i < f->nentries; i++) {
    const struct dc_folder_entry *a = &f->entries[i - 1], *b = &f->entries[i];
    if (strcmp(a->name, b->name) == 0)
      return dc_error(DC_ERR_FORMAT, "%s: tensor \"%s\" is in both shard \"%s\" and shard \"%s\"",
                      f->dir, a->name, folder_shard_name(f, a->shard),
                      folder_shard_name(f, b->shard));
  }
  return NULL;
}

/* Entries and weight_map are both sorted by name: walk them together. */
static dc_status *folder_check_index(const dc_folder *f, const folder_index *x) {
  const char *path = x->doc.path;
  int i = 0, k = 0;
  while (i < f->nentries || k < x->nitems) {
    const struct dc_folder_entry *e = i < f->nentries ? &f->entries[i] : NULL;
    const folder_map_item *m = k < x->nitems ? &x->items[k] : NULL;
    int c = !e ? 1 : !m ? -1 : strcmp(e->name, m->tensor);
    if (c < 0)
      return dc_error(DC_ERR_MISMATCH, "%s: tensor \"%s\" in shard \"%s\" is not in \"weight_map\"",
                      path, e->name, folder_shard_name(f, e->shard));
    if (c > 0)
      return dc_error(
          DC_ERR_MISMATCH,
          "%s: \"weight_map\" puts \"%s\" in shard \"%s\" but that shard has no tensor \"%s\"",
          path, m->tensor, m->shard_name, m->tensor);
    if (e->shard != m->shard)
      return dc_error(DC_ERR_MISMATCH,
                      "%s: \"weight_map\" puts \"%s\" in shard \"%s\" but it is in shard \"%s\"",
                      path, m->tensor, m->shard_name, folder_shard_name(f, e->shard));
    i++, k++;
  }
  return NULL;
}

/* ---- open / close / find ------------------------------------------------------ */

static dc_status *folder_open_weights(dc_folder *f, const char *variant) {
  char *single = NULL, *index = NULL;
  DC_TRY(folder_locate_weights(folder_names_of(f), f->dir, variant, &single, &index));
  dc_status *st = NULL;
  folder_index x;
  if (single) {
    f->shards = dc_calloc(1, sizeof *f->shards);
    st = f->shards ? dc_st_open(single, &f->shards[0]) : dc_nomem("opening weights");
    if (!st) f->nshards = 1;
    if (!st) st = folder_build_entries(f);
  } else if (!(st = folder_index_load(index, &x))) {
    st = folder_open_shards(f, &x);
    if (!st) st = folder_build_entries(f);
    if (!st) st = folder_check_index(f, &x);
    folder_index_free(&x);
  }
  dc_free(single);
  dc_free(index);
  return st;
}

static dc_status *folder_open_config(dc_folder *f) {
  char *p = dc_path_join(f->dir, "config.json");
  if (!p) return dc_nomem("opening a model folder");
  dc_status *st =
      dc_file_exists(p)
          ? dc_json_load(p, &f->config)
          : dc_error(DC_ERR_IO, "%s: no config.json (is this a diffusers model folder?)", f->dir);
  dc_free(p);
  DC_TRY(st);
  return dc_class_of_config(&f->config, &f->class_name, &f->desc);
}

dc_status *dc_folder_open(const char *path, const dc_folder_options *opt, dc_folder *out) {
  static const dc_folder_options none = {0};
  if (!opt) opt = &none;
  memset(out, 0, sizeof *out);
  DC_TRY(folder_check_dir(path, &out->dir));
  char *mi = dc_path_join(out->dir, "model_index.json");
  dc_status *st = mi ? NULL : dc_nomem("opening a model folder");
  if (!st && dc_file_exists(mi)) st = folder_enter_component(&out->dir, mi, opt->component);
  else if (!st && opt->component)
    st = dc_error(DC_ERR_ARGUMENT,
                  "%s: --component %s given, but this is not a pipeline folder (no "
                  "model_index.json)",
                  out->dir, opt->component);
  dc_free(mi);
  if (!st) st = folder_open_config(out);
  if (!st) st = folder_open_weights(out, opt->variant);
  if (st) dc_folder_close(out);
  return st;
}

void dc_folder_close(dc_folder *f) {
  if (!f->borrowed) {
    for (int s = 0; s < f->nshards; s++) dc_st_close(&f->shards[s]);
    dc_free(f->shards);
  }
  dc_free(f->entries);
  dc_json_free(&f->config);
  dc_free(f->dir);
  void *owner = f->owner;
  void (*close_owner)(void *) = f->close_owner;
  memset(f, 0, sizeof *f);
  if (close_owner) close_owner(owner);
}

/* ---- a folder over another owner's tensors ---------------------------------- */

static dc_status *folder_copy_entries(dc_folder *f, const struct dc_folder_entry *entries, int n) {
  f->entries = dc_malloc(sizeof *f->entries * (size_t)(n ? n : 1));
  if (!f->entries) return dc_nomem("listing tensors");
  if (n) memcpy(f->entries, entries, sizeof *f->entries * (size_t)n);
  f->nentries = n;
  qsort(f->entries, (size_t)n, sizeof *f->entries, folder_entry_cmp);
  for (int i = 0; i < n; i++) {
    if (f->entries[i].shard != 0)
      return dc_error(DC_ERR_INTERNAL, "%s: tensor \"%s\" refers to file %d of a one-file folder", f->dir,
                      f->entries[i].name, f->entries[i].shard);
    if (i && strcmp(f->entries[i - 1].name, f->entries[i].name) == 0)
      return dc_error(DC_ERR_INTERNAL, "%s: two tensors are both called \"%s\"", f->dir, f->entries[i].name);
  }
  return NULL;
}

dc_status *dc_folder_from_views(const char *dir, const char *config_path, dc_st_file *file,
                                const struct dc_folder_entry *entries, int n, dc_folder *out) {
  memset(out, 0, sizeof *out);
  out->borrowed = 1;
  out->shards = file;
  out->nshards = 1;
  out->dir = dc_strdup(dir);
  dc_status *st = out->dir ? NULL : dc_nomem("opening a model");
  if (!st) st = dc_json_load(config_path, &out->config);
  if (!st) st = dc_class_of_config(&out->config, &out->class_name, &out->desc);
  if (!st) st = folder_copy_entries(out, entries, n);
  if (st) dc_folder_close(out);
  return st;
}

const struct dc_folder_entry *dc_folder_find(const dc_folder *f, const char *name) {
  struct dc_folder_entry key = {.name = name};
  if (f->nentries == 0) return NULL;
  return bsearch(&key, f->entries, (size_t)f->nentries, sizeof key, folder_entry_cmp);
}
