"""The GRPO trainer's settings (:mod:`~training.tiny.trainers.grpo`), named as in SkyRL where SkyRL
has the setting."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from training.tiny.trainers.schedules import Schedule


class GRPOConfig(BaseModel):
    """GRPO settings, named as in SkyRL where SkyRL has the setting."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="after")
    def _greedy_fits(self) -> GRPOConfig:
        if self.greedy_samples_per_prompt >= self.n_samples_per_prompt:
            raise ValueError("greedy_samples_per_prompt must be below n_samples_per_prompt (a group needs sampled members)")
        if self.state_groups and not self.greedy_samples_per_prompt:
            raise ValueError("state_groups roots its groups in greedy episodes: set greedy_samples_per_prompt >= 1")
        if self.state_groups and self.perturbed_starts:
            raise ValueError("state_groups and perturbed_starts cannot be combined (state groups root at turns "
                             "counted from the maze's start)")
        if self.hard_replay_fraction + self.perturbed_starts > 1:
            raise ValueError("hard_replay_fraction + perturbed_starts must be at most 1 (both are shares of train_batch_size)")
        return self

    model_path: str = Field(description="SFT base model folder the adapter is trained on (policy.model.path)")
    init_adapter: str | None = Field(
        None, description="adapter folder to start from instead of a zero LoRA, e.g. an earlier run's export "
        "continued on another machine; ignored when resuming from a checkpoint")
    ckpt_path: str = Field(description="checkpoints (trainer.ckpt_path)")
    export_path: str = Field(description="adapter exports and dumped evals (trainer.export_path)")
    seed: int = Field(42, description="seeds the maze draws, the LoRA initialization and sampling: with the "
                      "config, a run is reproducible on one device")
    n_samples_per_prompt: int = Field(8, ge=2, description="episodes per maze (the GRPO group)")
    greedy_samples_per_prompt: int = Field(
        0, ge=0, description="members of each group decoded greedily (not a SkyRL setting), with the sampling "
        "distribution's log-probs: brings the states greedy evaluation reaches into the group")
    train_batch_size: int = Field(32, ge=1, description="mazes per step")
    state_groups: int = Field(
        0, ge=0, description="groups per step rooted at states of the step's greedy episodes, failed ones first "
        "(not a SkyRL setting, see training/tiny/data/state_groups.py): state_group_size replies sampled there, each played "
        "on greedily, the outcome's group advantage given to that one reply")
    state_group_size: int = Field(8, ge=2, description="sampled replies per state group")
    hard_replay_fraction: float = Field(
        0.0, ge=0, lt=1, description="share of each step's mazes replayed from recent ones whose group solved "
        "at most half (not a SkyRL setting). A maze that needs a detour away from the goal is failed by "
        "nearly every sample, so its group is all zeros and carries no advantage; replaying it gives "
        "exploration more tries. A maze is replayed at most twice, one that cannot be solved within max_turns "
        "never; the buffer is not checkpointed")
    detour_share: float = Field(
        0.0, ge=0, le=1, description="share of each step's fresh mazes drawn from those whose optimal path needs a "
        "detour away from the goal (not a SkyRL setting; drawn by rejection sampling). Detour mazes are a small "
        "minority of random mazes and the ones a policy that walks toward the goal fails, so a plain batch holds "
        "few groups with any advantage on them; larger shares trade direct tasks for detour ones")
    held_out_seeds: int = Field(
        0, ge=0, description="training never draws the task of an env seed 0..N-1 (not a SkyRL setting): with 64, "
        "the fixed maze set the served curve and maze-eval score stays unseen, so a rise on it is not memorization; "
        "0 draws from all 768 tasks")
    perturbed_starts: float = Field(
        0.0, ge=0, le=1, description="share of each step's mazes whose group starts after 1..perturbed_max_moves "
        "forced random moves (not a SkyRL setting, see training/tiny/data/perturbed_starts.py): the states a wrong turn leads "
        "to, where greedy evaluation gets stuck, with the same turn limit and reward")
    perturbed_max_moves: int = Field(3, ge=1, description="most forced moves before a perturbed group's first turn")
    policy_mini_batch_size: int = Field(32, ge=1, description="mazes per optimizer step")
    micro_batch_size: int = Field(1024, ge=1, description="turn samples per forward/backward: bounds memory, "
                                  "not the update (gradients accumulate over a mini-batch)")
    update_epochs_per_batch: int = Field(1, ge=1, description="passes over each step's rollouts "
                                         "(trainer.update_epochs_per_batch)")
    lr: float = Field(5e-4, gt=0, description="peak AdamW learning rate (trainer.policy.optimizer_config.lr)")
    scheduler: Schedule = Field("constant", description="constant, or cosine from lr to 0 at max_steps "
                                "(trainer.policy.optimizer_config.scheduler in SkyRL, which names its own kinds)")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay on the LoRA weights")
    max_grad_norm: float = Field(1.0, gt=0, description="gradient norm clip per optimizer step; a non-finite "
                                 "norm skips the update")
    eps_clip_low: float = Field(0.2, ge=0, description="PPO clip below: the ratio's floor is 1 - eps_clip_low")
    eps_clip_high: float = Field(0.2, ge=0, description="PPO clip above: the ratio's ceiling is 1 + eps_clip_high")
    loss_reduction: str = Field(
        "sequence_mean", pattern="^(token_mean|sequence_mean|seq_mean_token_sum_norm)$",
        description="trainer.algorithm.loss_reduction; a sequence is a whole episode. token_mean weighs every "
        "reply token once, so long (mostly failed) episodes outweigh short solved ones on the format tokens they "
        "share; sequence_mean weighs every episode once; seq_mean_token_sum_norm divides by the longest possible "
        "episode",
    )
    use_kl_loss: bool = Field(False, description="KL loss to the base model (adapter disabled), SkyRL's k3 estimator")
    kl_loss_coef: float = Field(0.001, ge=0, description="weight of the KL loss (with use_kl_loss)")
    adam_eps: float = Field(1e-8, gt=0, description="AdamW eps; larger damps lr-sized steps on tiny, noisy gradients")
    max_turns: int = Field(15, ge=1, description="turn limit per episode, in training and evaluation "
                           "(generator.max_turns; the env variant's limit by default)")
    temperature: float = Field(1.0, gt=0, description="sampling temperature of training rollouts; the PPO ratio "
                               "is taken against this distribution (evaluation is greedy)")
    max_generate_length: int = Field(12, ge=1, description="reply tokens per turn")
    lora_rank: int = Field(32, ge=1, description="LoRA rank; an init_adapter of a lower rank is widened to it, "
                           "same function (the gateway serves ranks up to serving lora.max_rank)")
    lora_alpha: int = Field(32, ge=1, description="LoRA alpha: the adapter's update is scaled by alpha / rank")
    lora_vision: bool = Field(
        False, description="diagnostic only: LoRA on the vision tower too (vLLM serves LoRA on the language "
        "model only, so such an adapter cannot ship); tells whether the frozen tower caps the policy")
    max_steps: int = Field(200, ge=1, description="training steps (trainer.total_training_steps)")
    max_minutes: float = Field(30.0, gt=0, description="wall-clock budget; stops after the step in flight")
    eval_interval: int = Field(5, ge=1, description="steps between greedy evaluations (trainer.eval_interval)")
    eval_before_train: bool = Field(True, description="evaluate the starting adapter as step 0 "
                                    "and export it as global_step_0, so a served curve starts where training starts "
                                    "(trainer.eval_before_train; not on a resume)")
    eval_seeds: int = Field(64, ge=1, description="eval set: seeds 0..N-1 of the env")
    eval_all_tasks: bool = Field(
        False, description="also play all 768 tasks of maze_2d/simple greedily at each eval (not a SkyRL setting): "
        "eval/all_tasks/pass_at_1 (and its detour part) is 12x the sample of the 64 seeds and not the set the "
        "adapter is picked on; it makes every eval about 12x as long")
    ckpt_interval: int = Field(10, ge=1, description="steps between checkpoints (trainer.ckpt_interval)")
    hf_save_interval: int = Field(10, ge=1, description="steps between adapter exports (trainer.hf_save_interval)")
    resume_mode: str = Field("latest", pattern="^(latest|none)$", description="latest: continue from the newest "
                             "checkpoint in ckpt_path if there is one; none: start over (trainer.resume_mode)")
    env_id: str = Field("maze_2d/simple", description="the spec's maze variant, recorded with the run's config "
                        "(grpo_config.json); the trainer plays 7x7 mazes, maze_2d/simple's")
    device: str = Field("cpu", description="torch device: cpu, cuda or cuda:N")
