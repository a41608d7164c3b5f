// Score classifications (DECISIONS.md "Scores and classifications"): one module, used everywhere.

export type Verdict = 'PASS' | 'UNCERTAIN' | 'FAIL';
export type PreflightVerdict = Verdict | 'UNRATED';
export type Grade = 'A' | 'B' | 'C' | 'D' | 'F';
export type SlaTier = 'Platinum' | 'Gold' | 'Silver' | 'Bronze' | 'Unrated';

export const PASS_THRESHOLD = 60;
export const FAIL_THRESHOLD = 40;
/** Minimum interactions in the last 30 days for any SLA tier above Unrated. */
export const SLA_MIN_INTERACTIONS_30D = 30;

/** Scores are reported with one decimal. */
export function roundScore(score: number): number {
  return Math.round(Math.min(100, Math.max(0, score)) * 10) / 10;
}

export function verdictFor(score: number): Verdict {
  if (score >= PASS_THRESHOLD) return 'PASS';
  if (score >= FAIL_THRESHOLD) return 'UNCERTAIN';
  return 'FAIL';
}

export function gradeFor(score: number): Grade {
  if (score >= 90) return 'A';
  if (score >= 75) return 'B';
  if (score >= 60) return 'C';
  if (score >= 40) return 'D';
  return 'F';
}

export function slaTierFor(score: number, interactions30d: number): SlaTier {
  if (interactions30d < SLA_MIN_INTERACTIONS_30D) return 'Unrated';
  if (score >= 90) return 'Platinum';
  if (score >= 75) return 'Gold';
  if (score >= 60) return 'Silver';
  if (score >= 40) return 'Bronze';
  return 'Unrated';
}

export const RECOMMENDATIONS: Record<PreflightVerdict, string> = {
  PASS: 'proceed',
  UNCERTAIN: 'caution',
  FAIL: 'block',
  UNRATED: 'no runtime evidence yet; proceed with caution and report the outcome to build evidence',
};
