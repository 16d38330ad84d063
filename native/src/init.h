/* Library initialisation: config -> region -> compute, once per process (gs_init). Handlers
 * call gs_ready() (one atomic load after the first time). */
#ifndef GS_INIT_H
#define GS_INIT_H

/* 1 when memory accounting applies in this process (valid config with a limit and a region). */
int gs_ready(void);
/* Run initialisation once (idempotent, thread-safe). Returns gs_ready(). */
int gs_init(void);

#endif
