/* common/kfac/kfac_schedule.h — the factor / inverse update intervals and the
 * damping as functions of the step (Pauloski et al. SC20 sec. V-C).
 *
 * Plain values, no allocation; functions return 0 or a negative errno and
 * reject bad input (never assert it). */
#ifndef KFAC_SCHEDULE_H
#define KFAC_SCHEDULE_H

#define KFAC_SCHEDULE_MAX 16

/* Factor and inverse update intervals and damping as functions of the step.
 * At every interval milestone passed (t >= milestone) both intervals are
 * multiplied by interval_factor (rounded, at least 1); at every damping
 * milestone the damping is multiplied by damping_factor. Milestones are
 * steps, strictly increasing. Pauloski et al. keep the factor interval a
 * tenth of the inverse interval (factors every kfac-update-freq / 10 steps);
 * here the two base intervals are independent. */
typedef struct kfac_schedule {
    int fac_interval;            /* steps between factor (statistics) updates at t = 0, >= 1 */
    int inv_interval;            /* steps between inverse updates at t = 0, >= 1 */
    double damping;              /* lambda at t = 0, > 0 */
    int n_interval_milestones;
    long interval_milestones[KFAC_SCHEDULE_MAX];
    double interval_factor;      /* > 0 */
    int n_damping_milestones;
    long damping_milestones[KFAC_SCHEDULE_MAX];
    double damping_factor;       /* > 0 */
} kfac_schedule_t;

/* Validate a schedule (positive intervals and factors, increasing
 * milestones, counts within KFAC_SCHEDULE_MAX). Returns 0 or -EINVAL. */
int kfac_schedule_check(const kfac_schedule_t *s);

/* Intervals and damping in force at step t >= 0 (any output may be NULL).
 * Returns 0 or -EINVAL. */
int kfac_schedule_at(const kfac_schedule_t *s, long t, int *fac_interval, int *inv_interval,
                     double *damping);

/* Is an update with this interval due at step t (t % interval == 0)? */
static inline int kfac_schedule_due(long t, int interval) {
    return interval > 0 && t >= 0 && t % interval == 0;
}

#endif
