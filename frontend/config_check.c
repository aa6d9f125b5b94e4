/* config_check.c — one policy for every model config (registry.h,
 * dc_config_check): a key is an argument of the class (its schema), or
 * bookkeeping its library writes and ignores; anything else is refused,
 * naming the file, the key and the nearest key the class knows, rather than
 * guessed at (diffusers only warns and drops it, so a misspelt key would
 * silently build another model).  An explicit null is taken only where the
 * class takes one.  The value of each key is then checked by the class's
 * own reading of it, which knows what it supports. */
#include "registry.h"

#include <string.h>

/* diffusers drops every key starting with "_" before __init__ (_class_name,
 * _diffusers_version, _name_or_path, _use_default_values, ...).  Its own
 * EMAModel.save_pretrained writes the EMA state into the config of the
 * model it saves; fine-tuned checkpoints on the Hub carry these, and the
 * model ignores them. */
static const char *const diffusers_bookkeeping[] = {
    "decay", "inv_gamma", "min_decay", "optimization_step", "power", "update_after_step", "use_ema_warmup", NULL,
};

/* transformers' PretrainedConfig keys every model config may carry: naming,
 * versions, output switches, tokens and generation defaults ("dtype" is
 * what transformers 5 writes for "torch_dtype").  A class that
 * does read one of them (a text encoder's eos_token_id) lists it in its own
 * schema, which is looked at first. */
static const char *const transformers_bookkeeping[] = {
    "_name_or_path", "_commit_hash", "_attn_implementation", "architectures", "model_type",
    "transformers_version", "torch_dtype", "dtype", "return_dict", "output_hidden_states", "output_attentions",
    "torchscript", "use_bfloat16", "tf_legacy_loss", "pruned_heads", "tie_word_embeddings",
    "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder", "cross_attention_hidden_size",
    "add_cross_attention", "tie_encoder_decoder", "finetuning_task", "id2label", "label2id", "num_labels",
    "problem_type", "tokenizer_class", "prefix", "bos_token_id", "pad_token_id", "eos_token_id",
    "sep_token_id", "decoder_start_token_id", "task_specific_params", "max_length", "min_length",
    "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty", "temperature",
    "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens", NULL,
};

static int listed(const char *const *list, const char *key) {
  for (; *list; list++)
    if (!strcmp(*list, key)) return 1;
  return 0;
}

static int is_bookkeeping(dc_library lib, const char *key) {
  if (lib == DC_LIB_DIFFUSERS) return key[0] == '_' || listed(diffusers_bookkeeping, key);
  return listed(transformers_bookkeeping, key);
}

const dc_config_key *dc_config_key_find(const dc_class_desc *c, const char *key) {
  for (const dc_config_key *k = c->keys; k->key; k++)
    if (!strcmp(k->key, key)) return k;
  return NULL;
}

/* Levenshtein distance, for the nearest-key hint; keys are short. */
static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63) return (size_t)-1;
  size_t row[64];
  for (size_t j = 0; j <= lb; j++) row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      diag = up;
      row[j] = best;
    }
  }
  return row[lb];
}

static const char *nearest_key(const dc_class_desc *c, const char *key) {
  const char *best = NULL;
  size_t best_d = (size_t)-1;
  for (const dc_config_key *k = c->keys; k->key; k++) {
    size_t d = edit_distance(key, k->key);
    if (d < best_d) best_d = d, best = k->key;
  }
  return best;
}

static const char *library_name(dc_library lib) {
  return lib == DC_LIB_DIFFUSERS ? "diffusers" : "transformers";
}

dc_status *dc_config_check(const dc_class_desc *c, const dc_json_doc *config) {
  for (const cJSON *v = config->root->child; v; v = v->next) {
    const dc_config_key *k = dc_config_key_find(c, v->string);
    if (!k && is_bookkeeping(c->library, v->string)) continue;
    if (!k)
      return dc_error(DC_ERR_UNSUPPORTED,
                      "%s: \"%s\" is not an argument of %s that diffc knows (the nearest it knows is \"%s\"); "
                      "diffc refuses to guess what it means (remove it if the model does not need it)",
                      config->path, v->string, c->name, nearest_key(c, v->string));
    /* An explicit null reaches the class as None: where its default is
     * another value, that is another model, or an error there. */
    if (cJSON_IsNull(v) && !k->nullable)
      return dc_error(DC_ERR_UNSUPPORTED,
                      "%s: \"%s\" is null, which diffc does not support (give a value, or leave the "
                      "key out for %s' default, %s)",
                      config->path, v->string, library_name(c->library), k->def);
  }
  return NULL;
}
