// The generation id's steps the converger can explain (src/reconcile/commit-steps.ts): its own
// commits that leave our tables alone, others' heard to name none of them, and a commit of ours
// told apart among others' by being the one step that named our tables.
import t from 'tap';
import { CommitSteps, ELSEWHERE_STEPS_KEPT } from '../../../src/reconcile/commit-steps.js';

t.test('nothing heard: only our own steps of one explain the generation id', async (t) => {
  const steps = new CommitSteps();
  t.equal(await steps.explained(10, 10), true, 'no step');
  t.equal(await steps.explained(10, 11), false, 'a step nobody explains');
  steps.noteOwn({ before: 10, after: 11 });
  t.equal(await steps.explained(10, 11), true, 'our held replies');
  t.equal(steps.pastOwn(10), 11);
  steps.noteOwn({ before: 11, after: 13 });
  t.equal(await steps.explained(10, 13), false, 'others came around ours: not told apart unheard');
  t.equal(await steps.explained(undefined, 13), false, 'from nowhere known');
});

t.test("others' commits heard to name none of our tables explain their steps", async (t) => {
  const steps = new CommitSteps();
  steps.hearBy(() => true);
  for (const genId of [21, 22, 23]) steps.noteElsewhere(genId, undefined);
  t.equal(await steps.explained(20, 23), true);
  t.equal(await steps.explained(20, 24), false, 'one step past them: not explained');
  steps.noteOurs(24);
  t.equal(await steps.explained(20, 24), false, 'a commit that named our tables is no explanation');
  t.ok(steps.quietMs() < 60_000, 'another tool was heard just now');
});

t.test('our commit among others: the one step that named our tables', async (t) => {
  const steps = new CommitSteps();
  steps.hearBy(() => true);
  steps.noteElsewhere(31, undefined);
  steps.noteOurs(32);
  steps.noteElsewhere(33, undefined);
  t.equal(await steps.heardOursAmong(30, 33), true, 'one step named ours');
  steps.noteOurs(34);
  steps.noteOurs(35);
  t.equal(await steps.heardOursAmong(33, 35), false, 'two named ours: not ours alone');
  // A held replies' commit with others around it, settled once heard: its step left us alone.
  steps.noteOwn({ before: 30, after: 33 });
  t.equal(await steps.explained(30, 33), true);
});

t.test('nothing heard: heardOursAmong never guesses', async (t) => {
  const steps = new CommitSteps();
  steps.noteOurs(2);
  t.equal(await steps.heardOursAmong(1, 2), false);
});

t.test('followed on from where our tables were known, however many steps come', async (t) => {
  const steps = new CommitSteps();
  steps.hearBy(() => true);
  const verified = 1_000;
  const count = ELSEWHERE_STEPS_KEPT * 3;
  for (let genId = verified + 1; genId <= verified + count; genId++)
    steps.noteElsewhere(genId, verified);
  t.equal(steps.leftAlone(verified, verified + count), true, 'past what the steps keep');
  t.equal(steps.leftAlone(verified + 1, verified + count), false, 'from elsewhere: forgotten');
});
