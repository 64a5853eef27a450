/* unwind_cfi.h — the unwinder's slow path: find the FDE that covers a pc and run its CFA program.
 * Private to src/record. */
#ifndef MT_RECORD_UNWIND_CFI_H
#define MT_RECORD_UNWIND_CFI_H

#include <stdint.h>

#include "unwind_rule.h"

typedef enum mt_cfi_status {
    MT_CFI_FOUND = 0,     /* *rule holds the rule (possibly MT_RULE_UNSUPPORTED/OUTERMOST) */
    MT_CFI_NO_OBJECT = 1, /* pc is in no loaded object (JIT code, garbage): do not cache */
} mt_cfi_status;

/* The rule that holds at `pc` (an exact instruction address: callers pass return address - 1).
 * Lock-free: _dl_find_object() and read-only tables. Never writes outside *rule. */
mt_cfi_status mt_cfi_rule_at(uintptr_t pc, mt_unwind_rule *rule);

#endif
