"""The LLM replica's engine settings (serving.engine): grouped CPU LoRA kernels, core split, allocator."""
