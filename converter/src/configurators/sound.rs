//! `<sound>`: ich9 (default) or ac97.

use super::Configurator;
use crate::domain::{Alias, Domain, SoundCard};
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;

/// Writes the sound card.
pub(super) struct Sound;

impl Configurator for Sound {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        let Some(sound) = &vmi.spec.domain.devices.sound else {
            return Ok(());
        };
        let model = match sound.model.as_deref().unwrap_or("") {
            "" | "ich9" => "ich9",
            "ac97" => "ac97",
            other => {
                return Err(ConvertError::new(
                    "spec.domain.devices.sound.model",
                    format!("invalid model: {other}"),
                ));
            }
        };
        domain.devices.sounds = vec![SoundCard {
            alias: Some(Alias::user(&sound.name)),
            model: model.into(),
        }];
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configurators::testing::{run, vmi};
    use serde_json::{Value, json};

    fn sound(sound: Value) -> Result<Domain, ConvertError> {
        run(
            &Sound,
            &vmi(json!({"domain": {"devices": {"sound": sound}}})),
        )
    }

    #[test]
    fn no_sound_card_unless_the_vmi_has_one() {
        assert!(sound(Value::Null).unwrap().devices.sounds.is_empty());
    }

    #[test]
    fn the_model_defaults_to_ich9_and_may_be_ac97() {
        for (model, written) in [
            (Value::Null, "ich9"),
            (json!("ich9"), "ich9"),
            (json!("ac97"), "ac97"),
        ] {
            let d = sound(json!({"name": "audio", "model": model})).unwrap();
            assert_eq!(
                d.devices.sounds,
                [SoundCard {
                    alias: Some(Alias::user("audio")),
                    model: written.into()
                }]
            );
        }
    }

    #[test]
    fn another_model_is_refused() {
        let err = sound(json!({"name": "audio", "model": "sb16"})).unwrap_err();
        assert_eq!(err.path, "spec.domain.devices.sound.model");
        assert_eq!(err.reason, "invalid model: sb16");
    }
}
